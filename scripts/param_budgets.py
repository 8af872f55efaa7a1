"""Paper Table 2 on the backbones at hand: every head's trainable parameters (fusion + classifier,
9 CoNLL-2003 labels) on all-MiniLM-L6-v2, all-mpnet-base-v2 and a roberta-large-shaped backbone,
counted on the meta device (no weights, no data, no download), with the extra layers' count
against Concat's: the paper compares Concat, DWAtt and R+n at a similar budget, which holds at
roberta-large's shape and not on the small backbones.

The extra layers are as many as `train-head` gives by default (the paper's Table 2: one on a
backbone of 12 layers or fewer, two on a 24-layer one). `layerfuse train-head --cache ENTRY
--dry-run` prints the same counts for a cache entry's backbone.

    python scripts/param_budgets.py      # writes docs/results/param_budgets.md
"""

from __future__ import annotations

import argparse
import time

from _common import publish, results_path

# name -> (layers, width, attention heads, FFN width): the backbones' configs
BACKBONES = {
    "all-MiniLM-L6-v2": (6, 384, 12, 1536),
    "all-mpnet-base-v2": (12, 768, 12, 3072),
    "roberta-large shape": (24, 1024, 16, 4096),
}
N_LABELS = 9  # CoNLL-2003's BIO tags over 4 entity types
HEADS = ("base", "scalarmix", "concat", "dwatt", "extra")


def extra_layers(n_layers: int) -> int:
    """The paper's Table 2 rule, train-head's default: one extra layer up to 12 layers, two above."""
    return 1 if n_layers <= 12 else 2


def budgets() -> dict[str, dict[str, int]]:
    from layerfuse.fusions import parameter_budget

    return {name: parameter_budget(n_layers=L, dim=d, num_heads=h, ffn_dim=f, n_labels=N_LABELS,
                                   extra_layers=extra_layers(L))
            for name, (L, d, h, f) in BACKBONES.items()}


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default=results_path("param_budgets"),
                        help="markdown file written ('' = print only)")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    counts = budgets()
    seconds = time.perf_counter() - t0
    lines = [f"Trainable parameters (fusion + classifier over {N_LABELS} labels) of every head with every layer "
             "1..L fused, counted on the meta device; extra: R+n with n as train-head's default (1 up to 12 "
             "layers, 2 above). extra / concat: the extra layers' count over Concat's. "
             f"Counting all three backbones took {seconds:.2f} s.", "",
             "| backbone | L | width | heads | FFN | n (extra) | " + " | ".join(HEADS) + " | extra / concat |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(HEADS) + "---:|"]
    for name, (L, d, h, f) in BACKBONES.items():
        c = counts[name]
        cells = " | ".join(f"{c[head]:,} ({c[head] / 1e6:.2f}M)" for head in HEADS)
        lines.append(f"| {name} | {L} | {d} | {h} | {f} | {extra_layers(L)} | {cells} | "
                     f"{c['extra'] / c['concat']:.2f} |")
    return publish(args.table, "\n".join(lines), title="Parameter budgets (paper Table 2)", script="param_budgets",
                   argv=argv)


if __name__ == "__main__":
    main()
