"""What the scripts share: the repository on ``sys.path`` (runnable from a checkout without
installing), the CoNLL-2003 data and cache they use, where their results go and the header every
results file starts with (the command, the machine, the dev set), for the grid scripts their
settings as data (`Study`: their common options, their table written), their grids run through
`layerfuse.experiments.run_grid` and the F1 cell of their tables, and for the benchmarks the pieces
more than one of them times (a CoNLL subset, the forward pass alone, a head's training step, a
command's peak memory).

A script imports this first (``python scripts/NAME.py`` puts scripts/ on ``sys.path``). The
library is imported inside the functions, so a script that only needs ``REPO`` stays light.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CONLL_ENV = "LAYERFUSE_CONLL2003"
# The CoNLL-2003 folder scripts read when --data is not given; unset, a script that needs the data says so.
CONLL = os.environ.get(CONLL_ENV) or None
MODEL = "all-MiniLM-L6-v2"
RESULTS = REPO / "docs" / "results"  # one file per script, <script name>.md, and its figures beside


def results_path(name: str, suffix: str = ".md") -> str:
    """Where the script ``name`` writes its results by default: docs/results/<name><suffix>."""
    return str(RESULTS / f"{name}{suffix}")


def say(message: str) -> None:
    """Progress goes to stderr: stdout is the table."""
    print(message, file=sys.stderr, flush=True)


def conll_data(data: str | os.PathLike | None) -> str:
    """``data`` checked to be a folder: a missing --data (with $LAYERFUSE_CONLL2003 unset) or a path
    that is not there ends the script with one line saying what to pass."""
    if not data:
        raise SystemExit(f"error: this script reads CoNLL-2003: pass --data PATH/conll2003 (a folder with "
                         f"eng.train/eng.testa/eng.testb or train.txt/dev.txt/test.txt) or set {CONLL_ENV}")
    if not os.path.isdir(data):
        raise SystemExit(f"error: --data {data} is not a folder (a CoNLL-2003 folder is expected)")
    return os.path.normpath(data)


def conll_entry(data: str | os.PathLike | None = CONLL, *, cache: str | None = None, model: str = MODEL,
                cache_dir: str | None = None, log=say):
    """``cache`` if given, else the entry `extract --model MODEL --dataset DATA` makes (train, dev
    and test: test F1 is reported at the best dev point) under ``cache_dir`` (else $LAYERFUSE_HOME),
    extracted first when missing."""
    from layerfuse.experiments import resolve_entry

    if cache:
        return resolve_entry(cache=cache, log=log)
    return resolve_entry(model=model, dataset=conll_data(data), cache_dir=cache_dir, log=log)


# --- A grid study as data: its defaults and options, read by one parser; its table written by one writer ---

class Study(NamedTuple):
    """A grid script's settings. ``name`` is the script (its command in the results header, --table's
    default docs/results/<name>.md); ``fusions``, ``shots``, ``epochs`` and ``seeds`` its grid's defaults;
    ``out`` the default of --out under runs/ (<name>.jsonl); ``threads`` None leaves torch's;
    ``library_defaults`` trains at train-head's defaults (each head's learning rate, DWAtt's default
    score) rather than the paper's protocol; ``defaults`` sets any other option's default; ``options``
    are the script's own, as (flag, add_argument keywords)."""
    name: str
    fusions: str = "base"
    shots: str = "8,128"
    epochs: int = 10
    seeds: int = 3
    threads: int | None = None
    out: str = ""
    library_defaults: bool = False
    defaults: dict = {}  # read, never changed
    options: tuple = ()

    def parse(self, doc: str, argv: list[str] | None = None) -> argparse.Namespace:
        """The options every grid script takes, then the study's own; the first paragraph of ``doc`` is --help."""
        from layerfuse.fusions.dwatt import LAYER_SCORE, LAYER_SCORES
        from layerfuse.training import PAPER_LR

        p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
        p.add_argument("--data", default=CONLL, help=f"CoNLL-2003 folder (default: ${CONLL_ENV})")
        p.add_argument("--model", default=MODEL)
        p.add_argument("--cache", default=None, help="a cache entry path (skips the lookup by model and data)")
        p.add_argument("--cache-dir", default=None, help="cache root (default: $LAYERFUSE_HOME)")
        p.add_argument("--fusions", default=self.fusions)
        p.add_argument("--shots", default=self.shots,
                       help="comma-separated N (N x C sentences per run, C entity types)")
        p.add_argument("--epochs", type=int, default=self.epochs)
        p.add_argument("--seeds", type=int, default=self.seeds, help="seeds 0..S-1")
        ours = self.library_defaults  # train-head's defaults, not the paper's protocol: --help says which
        p.add_argument("--lr", type=float, default=PAPER_LR,
                       help="default: each head's own, as train-head's" if ours else
                       "default: the paper's (these scripts reproduce its protocol)")
        p.add_argument("--layer-score", default="paper", choices=LAYER_SCORES,
                       help=f"DWAtt's score over layers (default: {'train-head' if ours else 'the paper'}'s)")
        p.add_argument("--batch-size", type=int, default=16)
        p.add_argument("--eval-points", type=int, default=5,
                       help="evenly spaced dev evaluations per run (0 = after every epoch)")
        p.add_argument("--device", default=None)
        p.add_argument("--threads", type=int, default=self.threads,
                       help="torch threads (sets LAYERFUSE_NUM_THREADS too); 0 leaves torch's default alone")
        p.add_argument("--workers", type=int, default=0,
                       help="worker processes (0 = this process, as the published timings were taken)")
        p.add_argument("--out", default=str(REPO / "runs" / (self.out or f"{self.name}.jsonl")),
                       help="JSON lines, one per run (reruns skip them)")
        p.add_argument("--table", default=results_path(self.name),
                       help="markdown file the table is written to ('' = print only)")
        if self.library_defaults:
            p.set_defaults(lr=None, layer_score=LAYER_SCORE.default)
        p.set_defaults(**self.defaults)
        for flag, options in self.options:
            p.add_argument(flag, **options)
        return p.parse_args(argv)

    def publish(self, args, argv: list[str] | None, text: str, *, title: str, records: list[dict], entry=None,
                dev: str | None = None, note: str = "") -> str:
        """``text`` printed, and written to --table under the results header: the runs' device (else
        --device), the dev set (``dev``, else the whole dev split of ``entry``), ``note`` below the text."""
        print("\n" + text)
        if args.table:
            dev = dev or dev_line(None, entry.split("dev").n_sentences)
            device = next((r["device"] for r in records), args.device)
            write_results(args.table, text + (f"\n\n{note}" if note else ""), title=title, script=self.name,
                          argv=argv, device=device, dev=dev)
        return text


def variant_results(out: str, name: str) -> str:
    """``<out stem>.<name>.jsonl``: run ids do not name the cache, so a grid run on several caches of
    one model and data (word or subword rows, float16 or int8) keeps one results file per cache."""
    stem, ext = os.path.splitext(out)
    return f"{stem}.{name}{ext or '.jsonl'}"


def variant_entry(args, **extract_options):
    """The entry of --model and --data made with ``extract_options`` (extracted first when missing)."""
    from layerfuse.experiments import resolve_entry

    return resolve_entry(model=args.model, dataset=conll_data(args.data), cache_dir=args.cache_dir,
                         extract_options=extract_options, log=say)


def split_list(text: str, cast=str) -> list:
    return [cast(x.strip()) for x in text.split(",") if x.strip()]


def args_entry(args):
    """The cache entry of a grid script's --data/--model/--cache/--cache-dir."""
    return conll_entry(args.data, cache=args.cache, model=args.model, cache_dir=args.cache_dir)


def conll_grid(args, *, axes: dict | None = None, **fields) -> list:
    """The `TrainConfig` of every run of --fusions x --shots x --seeds (x ``axes``, a field and its
    values), at --epochs; ``fields`` fixes more config fields for every run."""
    from layerfuse.experiments import grid
    from layerfuse.training import TrainConfig

    base = TrainConfig(fusion="base", shots=None, epochs=args.epochs, seed=0, lr=args.lr, batch_size=args.batch_size,
                       eval_points=args.eval_points or None, device=args.device,
                       layer_score=getattr(args, "layer_score", "paper"), **fields)
    return grid(fusions=split_list(args.fusions), shots=split_list(args.shots, int), epochs=[args.epochs],
                trials=args.seeds, base=base, **(axes or {}))


def run_conll_grid(args, entry, configs: list, results: str | None = None, **options) -> list[dict]:
    """`run_grid` into ``results`` (else --out) with --workers: the runs not there yet; the records of
    all ``configs``."""
    from layerfuse.experiments import run_grid

    return list(run_grid(entry, configs, results=results or args.out, workers=args.workers, log=say,
                         **options).values())


def run_variants(args, entries: dict, configs: list, results=None) -> dict[str, list[dict]]:
    """`run_conll_grid` on each entry (name -> entry) into ``results(name)``, else `variant_results`: the records."""
    return {name: run_conll_grid(args, entry, configs, results(name) if results else variant_results(args.out, name))
            for name, entry in entries.items()}


@contextmanager
def torch_threads(n: int | None):
    """``n`` torch threads here and in `train_head` (LAYERFUSE_NUM_THREADS) for the block, then
    both as they were (a test calls main() in its own process); 0 or None changes nothing."""
    import torch

    before, env_before = torch.get_num_threads(), os.environ.get("LAYERFUSE_NUM_THREADS")
    if n:
        torch.set_num_threads(n)
        os.environ["LAYERFUSE_NUM_THREADS"] = str(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env_before is None:
            os.environ.pop("LAYERFUSE_NUM_THREADS", None)
        else:
            os.environ["LAYERFUSE_NUM_THREADS"] = env_before


def f1_cell(runs: list[dict], metric: str = "best_dev_f1") -> str:
    """Best dev F1 (or, with ``metric="test_f1_at_best"``, the test F1 at the best dev point) x100
    over ``runs``: 'mean ± std (runs)', '-' for none (a cache without a test split)."""
    scores = [100 * r[metric] for r in runs if r.get(metric) is not None]
    if not scores:
        return "-"
    std = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return f"{statistics.mean(scores):.1f} ± {std:.1f} ({len(scores)})"


def runs_of(records: list[dict], **config) -> list[dict]:
    """The records whose config has every given field at the given value."""
    return [r for r in records if all(r["config"].get(k) == v for k, v in config.items())]


def pair_table(by_variant: dict[str, list[dict]], a: str, b: str, fusions: list[str], shots: list[int],
               more: tuple = ()) -> str:
    """Markdown: per fusion and N, variant ``b``'s runs against ``a``'s: dev F1 of each, b − a (the
    difference of their mean best dev F1 x100), test F1 of each, median seconds per run of each; then
    the ``more`` columns, (header, cell of a's and b's runs)."""
    head = [f"{a} dev F1", f"{b} dev F1", f"{b} − {a}", f"{a} test F1", f"{b} test F1", f"{a} s/run", f"{b} s/run",
            *(name for name, _ in more)]
    lines = ["| fusion | N | " + " | ".join(head) + " |", "|---|---:|" + "---:|" * len(head)]
    for fusion in fusions:
        for n in shots:
            x, y = (runs_of(by_variant.get(v, []), fusion=fusion, shots=n) for v in (a, b))
            dev = [statistics.mean(r["best_dev_f1"] for r in runs) for runs in (x, y) if runs]  # a's, b's
            secs = [f"{statistics.median(r['seconds']['total'] for r in runs):.1f}" if runs else "-" for runs in (x, y)]
            cells = [f1_cell(x), f1_cell(y), f"{100 * (dev[1] - dev[0]):+.1f}" if len(dev) == 2 else "-",
                     f1_cell(x, "test_f1_at_best"), f1_cell(y, "test_f1_at_best"), *secs, *(f(x, y) for _, f in more)]
            lines.append(f"| {fusion} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- Results files: the table, and above it what made it -----------------------------------------------

def cpu_line() -> str:
    """CPU model and the flags that decide bf16 speed."""
    import torch

    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return "cpu: unknown"
    lines = text.splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags]
    return f"cpu: {model}; flags: {', '.join(wanted) or 'none of avx2/avx512/amx'}; torch {torch.__version__}"


def machine_line(device: str | None = None) -> str:
    """The machine a result was measured on: the GPU when ``device`` is one, else the CPU and its cores."""
    import torch

    if device and str(device).startswith("cuda") and torch.cuda.is_available():
        return f"gpu: {torch.cuda.get_device_name(torch.device(device))}; torch {torch.__version__}"
    return f"{cpu_line()}; {os.cpu_count()} cores"


def dev_line(dev_sentences: int | None, total: int | None = None) -> str:
    """What the dev F1 was measured on: the whole split, or a fixed random subset of it."""
    of = f" of the {total:,}" if total else ""
    if dev_sentences and (total is None or dev_sentences < total):
        return (f"a fixed random subset of {dev_sentences:,}{of} dev sentences, the same for every run "
                f"(`--dev-sentences {dev_sentences}`)")
    return f"all {total:,} dev sentences" if total else "the whole dev split"


# A path of the machine that ran a script (absolute outside the repository, or under a hidden folder such as
# .gpu/) means nothing to a reader: results show ``PATH/<its last part>`` instead. In a command's arguments
# a relative path leaving the checkout (../shared/...) is one too; in prose, ../ is a link between pages.
_ENDING = r"[^\s`'\"),;]*[^\s`'\"),;:.]"
MACHINE_PATH = re.compile(r"(?<![\w./-])(?:/[\w.-]+/|\.[A-Za-z][\w-]*/)" + _ENDING)
MACHINE_ARG = re.compile(r"(?<![\w./-])(?:/[\w.-]+/|\.[A-Za-z][\w-]*/|\.\./)" + _ENDING)


def public_path(text: str, *, pattern: re.Pattern = MACHINE_PATH) -> str:
    """``text`` with every machine path in it shown as ``PATH/<last part>`` (a path into the
    repository as a path relative to it)."""
    def repl(m):
        path = m.group(0)
        if path.startswith("/") and Path(path).is_relative_to(REPO):
            return str(Path(path).relative_to(REPO))
        return "PATH/" + path.rstrip("/").rsplit("/", 1)[-1]

    return pattern.sub(repl, text)


def command_line(script: str, argv: list[str]) -> str:
    """``python scripts/<script>.py ARGS`` as a reader would type it: machine paths as ``PATH/...``,
    an argument holding an apostrophe in double quotes (shlex.join would write ``'"'"'``)."""
    def quote(arg: str) -> str:
        arg = public_path(arg, pattern=MACHINE_ARG)
        if "'" in arg and not any(c in arg for c in '"$`\\!'):
            return f'"{arg}"'
        return shlex.quote(arg)

    return " ".join(["python", f"scripts/{script}.py", *map(quote, argv)])


def write_results(path: str | os.PathLike, text: str, *, title: str, script: str, argv: list[str] | None,
                  device: str | None = None, dev: str | None = None, machine: str | None = None) -> str:
    """Write ``text`` to ``path`` under a header: the title, the command that made it (``script`` with
    ``argv``, sys.argv's when None), the machine (this one, or ``machine`` for figures re-rendered
    from a record of another), and the dev set when the script evaluates on one."""
    argv = sys.argv[1:] if argv is None else list(argv)
    lines = [f"# {public_path(title)}", "", f"Made by `{command_line(script, argv)}`.", "",
             f"Machine: {machine or machine_line(device)}."]
    if dev:
        lines += ["", f"Dev: {dev}."]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    text = public_path(text.strip("\n"))  # captions name --model, --data, --out as the script was given them
    Path(path).write_text("\n".join(lines) + "\n\n" + text + "\n", encoding="utf-8")
    return str(path)


def publish(table: str | None, text: str, **header) -> str:
    """``text`` printed, and written to ``table`` (unless it is '' or None) under the results header
    `write_results` gives it from ``header``; returns ``text``."""
    print(text)
    if table:
        write_results(table, text, **header)
    return text


def copy_records(records: list[dict], path: str, *, head) -> None:
    """Per-run records one JSON line each, by ``head(record)``, N and seed, so the numbers can be checked
    run by run; the cache's machine path shown as PATH/<its name>."""
    import json

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in sorted(records, key=lambda r: (head(r), r["config"]["shots"], r["config"]["seed"])):
            f.write(json.dumps(dict(r, cache_path=public_path(str(r.get("cache_path", ""))))) + "\n")


def beside(path: str | os.PathLike, what: str) -> str:
    """A file that goes with the results file ``path``: docs/results/NAME.md -> docs/results/NAME_<what>."""
    path = Path(path)
    return str(path.with_name(f"{path.stem}_{what}"))


# --- What more than one benchmark times -------------------------------------------------------------

LENGTHS = [14, 3, 25, 9, 31, 12, 7, 2, 18, 22, 11, 5, 40, 8, 6, 11]  # a CoNLL batch of the N = 128 sample


def call_seconds(fn, calls: int) -> list[float]:
    """The wall seconds of each of ``calls`` calls of ``fn()``."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def write_subset(data_dir: str, n: int, out: Path) -> list[list[str]]:
    """The first ``n`` sentences of CoNLL-2003 train as ``out/train.txt``; returns their words."""
    from layerfuse.extract.datasets import load_dataset

    sentences = load_dataset(conll_data(data_dir), splits=["train"]).splits["train"][:n]
    out.mkdir(parents=True, exist_ok=True)
    with (out / "train.txt").open("w") as f:
        for words, tags in sentences:
            f.writelines(f"{w} {t}\n" for w, t in zip(words, tags))
            f.write("\n")
    return [w for w, _ in sentences]


def run_floor(words, model_name, *, precision: str = "fp32") -> float:
    """Seconds of the forward passes alone (under ``precision``), on exactly the batches `extract`
    plans (unit by unit): the floor extraction is measured against."""
    import numpy as np
    import torch

    from layerfuse.extract.encode import UnitEncoder, row_map
    from layerfuse.extract.entry import default_token_budget, default_unit_rows
    from layerfuse.extract.models import load_model, load_tokenizer, model_info
    from layerfuse.extract.tokenize import tokenize_words

    info = model_info(model_name)
    tok_ = load_tokenizer(info)
    model = load_model(info, device=torch.device("cpu"))
    tok = tokenize_words(tok_, words)
    rows = row_map(tok, granularity="word", pooling="first")
    enc = UnitEncoder(model, tok_, device=torch.device("cpu"), precision=precision,
                      token_budget=default_token_budget(torch.device("cpu")),
                      max_length=info.max_length)
    unit = default_unit_rows(info.num_layers + 1, info.hidden_size, 2)
    n_rows = int(rows.row_offsets[-1])
    batches = []
    for lo in range(0, n_rows, unit):
        hi = min(lo + unit, n_rows)
        first = int(np.searchsorted(rows.row_offsets, lo, side="right") - 1)
        last = int(np.searchsorted(rows.row_offsets, hi, side="left"))
        batches += [enc.inputs(tok, b) for b in enc.plan_batches(tok, range(first, last))]
    t0 = time.perf_counter()
    for ids, mask in batches:
        enc.forward(ids, mask)
    return time.perf_counter() - t0


def head_step(fusion: str, precision: str, *, compiled: bool = False, fusion_class=None, pack: int = 1):
    """A closure running one training step of ``fusion`` on a fixed packed batch (`LENGTHS`, MiniLM
    shape: L = 6, d = 384); ``compiled``: the forward and the loss through `torch.compile`;
    ``fusion_class``: a subclass of the fusion's module to time instead (same weights); ``pack``: K
    heads (seeds 0..K-1) stepped together as `sweep --pack K` does, each on its own copy of the batch."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from layerfuse.fusions import TokenTagger
    from layerfuse.training import TrainConfig
    from layerfuse.training.loop import PACK_MULTIPLE
    from layerfuse.training.packed import Pack, PackOptimizer

    def tagger_of(seed: int):
        torch.manual_seed(seed)
        return TokenTagger(fusion=fusion, n_layers=6, dim=384, num_heads=12, ffn_dim=1536, n_labels=9,
                           extra_layers=1).train()

    tagger = tagger_of(0)
    if fusion_class is not None:  # the same initial weights, another forward
        variant = fusion_class.__new__(fusion_class)
        variant.__dict__.update(tagger.fusion.__dict__)
        tagger.fusion = variant
    lengths = torch.tensor(LENGTHS)
    rows = int(lengths.sum()) + (-int(lengths.sum()) % PACK_MULTIPLE)
    hidden, labels = torch.randn(1, rows, 6, 384), torch.randint(0, 9, (rows,))
    mask = torch.ones(1, rows, dtype=torch.bool)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext
    if pack > 1:
        taggers = [tagger] + [tagger_of(seed) for seed in range(1, pack)]
        heads = Pack(taggers)
        heads.train(True)
        config = TrainConfig(fusion=fusion, shots=None, epochs=1, seed=0, lr=1e-3)
        optimizer = PackOptimizer(heads, [SimpleNamespace(config=config, head=t, total_steps=10**9) for t in taggers])
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        stacked = (hidden.expand(pack, *hidden.shape).to(dtype), mask.expand(pack, *mask.shape),
                   labels.expand(pack, 1, rows), [lengths] * pack)
        return lambda: heads.step_on(*stacked, heads=list(range(pack)), optimizer=optimizer, autocast=autocast(),
                                     max_grad_norm=1.0)
    optimizer = torch.optim.AdamW(tagger.parameters(), lr=1e-3, fused=True)

    def loss():
        with autocast():
            logits = tagger(hidden, mask, lengths)
        return F.cross_entropy(logits.float().flatten(0, 1), labels)

    loss_of = torch.compile(loss) if compiled else loss

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_of().backward()
        torch.nn.utils.clip_grad_norm_(tagger.parameters(), 1.0)
        optimizer.step()

    return step


class PeakRss:
    """The kernel's high-water RSS (VmHWM) of a process and of every descendant, polled."""

    def __init__(self, pid: int):
        self.pid, self.peaks, self._stop = pid, {}, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _tree(self, pid: int) -> list[int]:
        out = [pid]
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                out += [c for child in (task / "children").read_text().split() for c in self._tree(int(child))]
            except OSError:
                pass
        return out

    def _poll(self):
        while not self._stop.is_set():
            for pid in self._tree(self.pid):
                try:
                    text = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                match = re.search(r"VmHWM:\s+(\d+) kB", text)
                if match:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), int(match.group(1)) / 1024)
            self._stop.wait(0.1)

    def stop(self) -> dict[int, float]:
        self._stop.set()
        self._thread.join()
        return self.peaks


def run_command(args: list[str], env: dict, *, cwd: str | None = None) -> dict:
    """`python -m layerfuse ARGS` (the layerfuse under ``cwd`` when given): stdout, wall seconds,
    peak RSS (MB) of the process and of its largest child (sweep workers)."""
    import subprocess

    say("$ layerfuse " + " ".join(args))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "layerfuse", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd)
    watch = PeakRss(proc.pid)
    out, err = proc.communicate()
    peaks = watch.stop()
    if proc.returncode != 0:
        sys.stderr.write(out + err)
        raise SystemExit(f"`layerfuse {' '.join(args)}` exited {proc.returncode}")
    children = [mb for pid, mb in peaks.items() if pid != proc.pid]
    return {"stdout": out, "stderr": err, "seconds": time.perf_counter() - t0, "peak_mb": peaks.get(proc.pid, 0.0),
            "worker_peak_mb": max(children, default=None)}


# --- A paper-scale backbone (random weights) and a CoNLL-2003 cut, for the benchmarks at roberta-large shape ---

ROBERTA_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                     max_position_embeddings=514, type_vocab_size=1)


def build_encoder(dest: Path, tokenizer: str | None = None) -> Path:
    """A roberta-large-shaped encoder with random weights and MiniLM's tokenizer (the built-in one's,
    or the one saved in the folder ``tokenizer``), saved once."""
    if (dest / "config.json").exists():
        return dest
    import torch
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    from layerfuse.extract.models import model_info

    tokenizer = AutoTokenizer.from_pretrained(tokenizer or model_info(None).path)
    config = RobertaConfig(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id, **ROBERTA_LARGE)
    torch.manual_seed(0)
    RobertaModel(config, add_pooling_layer=False).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def write_dataset(dest: Path, data: Path, limits: dict[str, int | None]) -> Path:
    """The first ``limits[split]`` sentences of each CoNLL split (None = all) as train/dev/test.txt."""
    from layerfuse.extract.datasets import load_dataset

    dataset = load_dataset(str(data))
    dest.mkdir(parents=True, exist_ok=True)
    for split, limit in limits.items():
        with (dest / f"{split}.txt").open("w", encoding="utf-8") as f:
            for words, tags in dataset.splits[split][:limit]:
                f.writelines(f"{w} {t}\n" for w, t in zip(words, tags))
                f.write("\n")
    return dest


# --- Paired per-seed differences between heads (the heads of one seed share its sample) ----------------


def paired_cells(a: dict, b: dict, *, above: bool = True, test_against: bool = True) -> str | None:
    """A table's cells for a − b paired by seed (`paired_diffs`): dev F1's mean ± 95% CI, `against_zero`,
    the per-seed differences, [how many lie above 0,] test F1's mean ± 95% CI[, `against_zero`]; None for
    no pair."""
    from layerfuse.experiments.paired import against_zero, ci_cell, paired_diffs

    dev = paired_diffs(a, b, key="best_dev_f1")
    if not dev:
        return None
    test = paired_diffs(a, b, key="test_f1_at_best")
    cells = [ci_cell(dev, signed=True), against_zero(dev), ", ".join(f"{d:+.1f}" for d in dev)]
    if above:
        cells.append(f"{sum(d > 0 for d in dev)} of {len(dev)}")
    cells.append(ci_cell(test, signed=True))
    if test_against:
        cells.append(against_zero(test) if test else "-")
    return " | ".join(cells)


def head_cells(runs: list[dict]) -> str:
    """One head's best dev F1 and test F1 at best x100, unpaired: 'mean ± 95% CI (runs) | ...'."""
    from layerfuse.experiments.paired import ci_cell

    return " | ".join(ci_cell([100 * r[key] for r in runs if r.get(key) is not None])
                      for key in ("best_dev_f1", "test_f1_at_best"))


def dev_curve(record: dict) -> dict[int, float]:
    """{epoch: dev F1 x100} of one run's evaluations after an epoch."""
    return {e["epoch"]: 100 * e["dev_f1"] for e in record["evals"] if e.get("epoch") is not None}


def epoch_cells(runs: list[dict], epochs: list[int]) -> str:
    """The dev F1 of ``runs`` after each of ``epochs``: 'mean ± 95% CI (runs) | ...'."""
    from layerfuse.experiments.paired import ci_cell

    curves = [dev_curve(r) for r in runs]
    return " | ".join(ci_cell([c[e] for c in curves if e in c]) for e in epochs)


PAPER_SCORE = "dwatt (paper score)"  # DWAtt with the paper's unscaled score, beside DWAtt at its default


def paper_head(record: dict) -> str:
    """The head a run trained: its fusion, or DWAtt with another score than its default (`PAPER_SCORE`
    for the paper's)."""
    c = record["config"]
    score = c.get("layer_score")
    return f"dwatt ({score} score)" if c["fusion"] == "dwatt" and score not in (None, "scaled") else c["fusion"]


def by_cell(records: list[dict], head=paper_head) -> dict:
    """{(head(record), N): {seed: record}}; two different runs in one place end the script (a head
    name that misses a setting the runs differ in would show one run's numbers under the other's name)."""
    cells: dict = {}
    for r in records:
        c = r["config"]
        cell = cells.setdefault((head(r), c["shots"]), {})
        other = cell.setdefault(c["seed"], r)
        if other.get("run_id") != r.get("run_id"):
            raise SystemExit(f"error: runs {other.get('run_id')} and {r.get('run_id')} are both "
                             f"'{head(r)}' at N = {c['shots']}, seed {c['seed']}")
    return cells


def read_records(path: str | os.PathLike) -> list[dict]:
    """The run records of a JSON-lines file."""
    import json

    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
