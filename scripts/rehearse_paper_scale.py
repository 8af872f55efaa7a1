"""A paper-scale rehearsal: the design card's commands on a roberta-large-shaped encoder (24 layers
x 1024, random weights built from a config, MiniLM's tokenizer) over CoNLL-2003, measuring what a
user of the card meets: the size estimate against the bytes written, extraction words/s in fp32 and
bf16 against the forward pass alone, and the peak memory of `extract`, of `train-head` (concat,
dwatt, extra at N = 8, 128 and all) and of each worker of a 2-worker `sweep`, on two dataset sizes.

    python scripts/rehearse_paper_scale.py --out runs/rehearsal --train-sentences 4000

"large" is the first --train-sentences of train with all of dev and test, "small" the first
--small-sentences of each split. Every command runs in its own process, as typed (peak RSS: the
kernel's high-water mark of it and its workers); training runs one epoch and one evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
from pathlib import Path

from _common import (
    CONLL,
    REPO,
    build_encoder,
    call_seconds,
    conll_data,
    cpu_line,
    results_path,
    run_command,
    run_floor,
    say,
    write_dataset,
    write_results,
)

from layerfuse.cache.manage import list_entries


def extract_figures(name: str, data: Path, model: Path, env: dict) -> dict:
    from layerfuse.cache.manage import bytes_on_disk
    from layerfuse.experiments.find import resolve_entry
    from layerfuse.extract.estimate import estimate
    from layerfuse.extract.run import ExtractConfig

    base = ["extract", "--model", str(model), "--dataset", str(data), "--precision", "bf16", "--quiet"]
    dry = run_command([*base, "--dry-run"], env)  # what the user sees; the figure comes from the same estimator
    guess = estimate(ExtractConfig(model=str(model), dataset=str(data), precision="bf16",
                                   cache_dir=env["LAYERFUSE_HOME"]), rate=False)
    done = run_command(base, env)
    entry = resolve_entry(model=str(model), dataset=str(data), cache_dir=env["LAYERFUSE_HOME"],
                          extract_options={"precision": "bf16"}, log=say)
    written = bytes_on_disk(entry.path)
    estimate = guess.entry_bytes + sum(s.bytes for s in guess.splits)
    words = sum(len(entry.split(s).labels) for s in entry.splits)
    return {"dataset": name, "entry": entry.path, "words": words, "estimate_bytes": estimate,
            "written_bytes": written, "estimate_ratio": estimate / written, "dry_run": dry["stdout"],
            "extract_seconds": done["seconds"], "extract_peak_mb": done["peak_mb"],
            "extract_report": done["stdout"]}


def speed_figures(model: Path, data: Path, root: Path, env: dict, *, repeats: int = 3) -> dict:
    """Words/s of `extract` (fp32, bf16) against the forward pass alone on the same batches."""
    from layerfuse.extract.datasets import load_dataset
    from layerfuse.extract.run import ExtractConfig, extract

    words = [w for w, _ in load_dataset(str(data)).splits["train"]]
    n = sum(len(w) for w in words)
    out = {}
    for precision in ("fp32", "bf16"):
        ext, floor = [], []
        for _ in range(repeats):
            shutil.rmtree(root, ignore_errors=True)  # every repeat extracts from scratch
            config = ExtractConfig(model=str(model), dataset=str(data), precision=precision, cache_dir=str(root))
            ext += call_seconds(lambda c=config: extract(c, progress=False, log=lambda m: None), 1)
            floor.append(run_floor(words, str(model), precision=precision))
        e, f = n / statistics.median(ext), n / statistics.median(floor)
        out[precision] = {"words": n, "extract_wps": e, "floor_wps": f, "ratio": e / f, "extract_s": ext,
                          "floor_s": floor}
        say(f"{precision}: extract {e:,.0f} words/s, forward alone {f:,.0f} words/s ({e / f:.2f})")
    shutil.rmtree(root, ignore_errors=True)
    return out


def train_figures(entry: str, env: dict, out: Path, *, fusions, shots) -> list[dict]:
    rows = []
    for fusion in fusions:
        for n in shots:
            folder = out / f"{fusion}-{n}"
            done = run_command(["train", "--cache", entry, "--fusion", fusion, "--shots", n, "--epochs", "1",
                        "--eval-points", "1", "--out", str(folder)], env)
            record = json.loads(max(folder.glob("*.json"), key=os.path.getmtime).read_text())
            s = record["seconds"]
            rows.append({"fusion": fusion, "shots": n, "params": record["params"],
                         "train_sentences": record["n_train_sentences"], "steps": record["total_steps"],
                         "ms_per_step": 1000 * s["train"] / max(record["total_steps"], 1), "eval_s": s["eval"],
                         "load_s": s.get("load"), "wall_s": done["seconds"], "peak_mb": done["peak_mb"],
                         "dev_f1": record["best_dev_f1"], "precision": record["config"]["precision"]})
            say(f"{fusion} N={n}: peak {done['peak_mb']:,.0f} MB, {rows[-1]['ms_per_step']:.0f} ms/step, "
                f"eval {s['eval']:.1f} s")
    return rows


def sweep_figures(entry: str, env: dict, out: Path) -> dict:
    done = run_command(["sweep", "--cache", entry, "--fusions", "concat,dwatt", "--shots", "8", "--epochs", "1",
                "--trials", "1", "--eval-points", "1", "--workers", "2", "--out", str(out)], env)
    return {"wall_s": done["seconds"], "parent_peak_mb": done["peak_mb"], "worker_peak_mb": done["worker_peak_mb"]}


def tables(fig: dict) -> str:
    gb = lambda b: f"{b / 1e9:.2f} GB"  # noqa: E731
    lines = ["Encoder: roberta-large shape (24 x 1024, random weights), MiniLM's tokenizer; cache float16, "
             "forward bf16 unless said.", ""]
    lines += ["| dataset | words | `--dry-run` estimate | written | ratio | extract peak RSS | extract time |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {e['dataset']} | {e['words']:,} | {gb(e['estimate_bytes'])} | {gb(e['written_bytes'])} | "
              f"{e['estimate_ratio']:.3f} | {e['extract_peak_mb']:,.0f} MB | {e['extract_seconds']:.0f} s |"
              for e in fig["extract"]]
    lines += ["", "| forward precision | extract words/s | forward alone words/s | ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {p} | {s['extract_wps']:,.0f} | {s['floor_wps']:,.0f} | {s['ratio']:.2f} |"
              for p, s in fig["speed"].items()]
    lines += ["", "| dataset | head | N | train sentences | params | ms/step | eval s (dev + test) | peak RSS |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {r['fusion']} | {r['shots']} | {r['train_sentences']:,} | {r['params'] / 1e6:.1f}M | "
              f"{r['ms_per_step']:.0f} | {r['eval_s']:.1f} | {r['peak_mb']:,.0f} MB |"
              for name, rows in fig["train"].items() for r in rows]
    lines += ["", "| dataset | 2-worker sweep (concat, dwatt, N = 8) | largest worker peak RSS | parent peak RSS |",
              "|---|---:|---:|---:|"]
    lines += [f"| {name} | {s['wall_s']:.0f} s | {s['worker_peak_mb']:,.0f} MB | {s['parent_peak_mb']:,.0f} MB |"
              for name, s in fig["sweep"].items()]
    lines += ["", "`train-head --model ... --dataset ... --dry-run` (extract's default options ask for an fp32 "
              f"forward): {' '.join(fig['reuse_log'])}"]
    lines += ["", "Parameter budgets (`train-head --dry-run`, paper Table 2):", "", "```", fig["budget"].strip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=CONLL)
    p.add_argument("--out", default=str(REPO / "runs" / "rehearsal"), help="model, datasets, cache root, runs")
    p.add_argument("--report", default=results_path("rehearse_paper_scale"),
                   help="markdown file written; the figures go beside it as .json")
    p.add_argument("--train-sentences", type=int, default=4000, help="train subset of the large dataset")
    p.add_argument("--small-sentences", type=int, default=1000, help="sentences per split of the small dataset")
    args = p.parse_args(argv)
    out, report = Path(args.out), Path(args.report)
    env = dict(os.environ, LAYERFUSE_HOME=str(out / "cache"), PYTHONPATH=str(REPO))
    os.environ["LAYERFUSE_HOME"] = env["LAYERFUSE_HOME"]
    model = build_encoder(out / "roberta-large-shape")
    data = Path(conll_data(args.data))
    sizes = {"large": {"train": args.train_sentences, "dev": None, "test": None},
             "small": dict.fromkeys(("train", "dev", "test"), args.small_sentences)}
    sets = {name: write_dataset(out / f"data-{name}", data, limits) for name, limits in sizes.items()}
    speed_data = write_dataset(out / "data-speed", data, {"train": 500})  # train sentences timed for words/s
    command = ["python", "scripts/rehearse_paper_scale.py", *(sys.argv[1:] if argv is None else argv)]
    fig = {"cpu": cpu_line(), "cores": os.cpu_count(), "command": shlex.join(command)}
    fig["extract"] = [extract_figures(name, d, model, env) for name, d in sets.items()]
    fig["speed"] = speed_figures(model, speed_data, out / "speed-cache", env)
    entries = {e["dataset"]: e["entry"] for e in fig["extract"]}
    # The design card's way in: --model/--dataset with extract's default options finds the bf16 entry.
    before = len(list_entries(env["LAYERFUSE_HOME"], sizes=False))
    budget = run_command(["train", "--model", str(model), "--dataset", str(sets["large"]), "--dry-run"], env)
    fig["budget"], fig["reuse_log"] = budget["stdout"], budget["stderr"].strip().splitlines()[-1:]
    if len(list_entries(env["LAYERFUSE_HOME"], sizes=False)) != before:
        raise SystemExit("rehearsal: train --model/--dataset wrote a second entry")
    fig["train"] = {"large": train_figures(entries["large"], env, out / "runs-large",
                                           fusions=("concat", "dwatt", "extra"), shots=("8", "128", "all")),
                    "small": train_figures(entries["small"], env, out / "runs-small", fusions=("concat",),
                                           shots=("8", "all"))}
    fig["sweep"] = {name: sweep_figures(e, env, out / f"sweep-{name}") for name, e in entries.items()}
    write_results(report, tables(fig), title="A paper-scale rehearsal (roberta-large shape)",
                  script="rehearse_paper_scale", argv=shlex.split(fig["command"])[2:],
                  machine=f"{fig['cpu']}; {fig['cores']} cores")  # its folder made
    report.with_suffix(".json").write_text(json.dumps(fig, indent=2))
    print(tables(fig))
    return fig


if __name__ == "__main__":
    main()
