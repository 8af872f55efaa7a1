"""Grids of runs over one cache: the runner behind `sweep` and every script in `scripts/`.

Every run is one `train_head` call. Runs already in the results file are skipped (so a grid
resumes); the rest run in this process (``workers=0``), in worker processes (one per core by
default) or as Ray tasks, each of which loads the data once (``load``) and trains run after run
from it (a part over the memory budget streams from the cache instead of being held, so a worker's
memory does not grow with the splits: `layerfuse.training.budget`), or, with ``load_per_run``,
loads each run's own data (when what a run reads is part
of what is measured). Finished runs are appended by this process alone, each line fsync'ed.

With ``pack`` K > 1, runs that differ in seed, N, rate or epoch cap train K at a time as one
stacked module (`layerfuse.training.packed`, grouped by `packs.pack_runs`): a pack is one unit of
work for the executors (a Ray task too), and its runs are appended one by one when it finishes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import product
from numbers import Number

import numpy as np

from ..display import f1_points
from ..errors import LayerfuseError, OptionError
from ..fusions.registry import owned_options
from ..lifeline import usable_cores
from ..training.config import TrainConfig
from .claims import Claims
from .heads import KEEP_HEADS, heads_dir, record_run, save_run_head
from .loaders import check_dev_entities, check_samples, check_warmups, load_cached
from .packs import pack_runs, packed
from .queue import POLL_S, claimed
from .results import read_results, run_id

Loader = Callable[[object, list], object]  # (CacheEntry, configs) -> data for train_head
Annotate = Callable[[TrainConfig, object, dict], None]  # (config, its data, its record): adds to the record


def grid(*, fusions, shots, epochs, trials: int, base: TrainConfig, **axes) -> list[TrainConfig]:
    """Every run of the grid, cheapest first (so early results arrive early); trial t uses seed t.
    ``axes`` adds more dimensions: a config field name and its values (e.g. ``lr=[5e-5, 1e-3]``).
    A setting some fusions own (`Fusion.options`) multiplies their runs alone: the others run once,
    at ``base``'s value. A single value stands for a list of it (``fusions="dwatt"``, ``shots=8``)."""
    trials = trials.item() if isinstance(trials, np.generic) else trials
    if not isinstance(trials, int) or trials < 1:
        raise LayerfuseError(f"trials {trials!r}: at least 1 (seeds 0..trials-1)")
    if not isinstance(base, TrainConfig):
        raise LayerfuseError(f"base must be a TrainConfig (the settings every run shares), got {base!r:.80}")

    def listed(values) -> list:  # a string, a number or None is one value: "12" is layers 12, not 1 and 2
        one = isinstance(values, (str, bytes, Number)) or values is None
        return [v.item() if isinstance(v, np.generic) else v for v in ([values] if one else values)]  # Python's

    names = ["fusion", "shots", "epochs", "seed", *axes]
    values = [listed(fusions), listed(shots), listed(epochs), range(trials), *map(listed, axes.values())]
    runs = {}
    for combo in product(*values):
        config = replace(base, **dict(zip(names, combo)))
        config = replace(config, **{option: base.fusion_option(option) for option, owners in owned_options().items()
                                    if config.fusion not in owners})
        runs.setdefault(run_id(config), config)
    return sorted(runs.values(), key=lambda c: ((c.shots or 10**9) * c.epochs, c.fusion, c.seed))


def run_grid(entry, configs: list[TrainConfig], *, results: str, workers: int | None = None,
             load: Loader = load_cached, load_per_run: bool = False, annotate: Annotate | None = None,
             ray: str | None = None, on_record=None, progress: bool = True, log=print,
             pack: int = 1, keep_heads: str = "none") -> dict[str, dict]:
    """Run every config not yet in ``results`` (a JSON-lines file) on ``entry``; returns the records
    of ``configs`` by run id, in their order. ``workers``: processes (None = one per core, 0 = this
    process); ``ray``: an address (or "local") to run each run as a Ray task instead.
    ``load_per_run``: call ``load(entry, [config])`` for every run, not once per executor, and put
    ``load_seconds`` and ``wall_seconds`` (load and train) in its record. ``annotate(config, data,
    record)`` runs where the run ran, beside its data (a top-level function, so workers get it by
    name); ``on_record(config, record)`` runs here as each run finishes. ``pack``: train up to this many
    runs that differ in seed, N, rate or epoch cap together (`layerfuse.training.packed`; 1 = one run
    at a time). ``keep_heads``: none, best (of each cell) or all: which runs' heads stay in ``heads/``
    beside ``results`` (`layerfuse.experiments.heads`).

    With ``workers=0`` the runs train in this process, as `train_head` trains them: each seeds torch's
    global generator with its run's seed (save and restore ``torch.get_rng_state()`` around the call to
    keep a stream of your own), malloc keeps freed heap, and the splits read stay in the activation store
    (`layerfuse.training.clear_store` lets them go). Worker processes and Ray tasks do all this in their own
    processes."""
    from tqdm.auto import tqdm

    from ..training.data import opened_entry

    entry = opened_entry(entry, "run_grid")
    if isinstance(configs, TrainConfig) or not all(isinstance(c, TrainConfig) for c in configs):
        raise LayerfuseError(f"configs must be a list of TrainConfig (`grid` makes one), got {configs!r:.80}")
    if workers is not None and workers < 0:
        raise LayerfuseError(f"workers {workers}: use 0 (this process), a number of processes, or None (one per core)")
    if pack > 1 and load_per_run:
        raise LayerfuseError("pack > 1 trains runs on data loaded once per executor; load_per_run times each alone")
    if keep_heads not in KEEP_HEADS:
        raise LayerfuseError(f"keep_heads {keep_heads!r} is not one of {', '.join(KEEP_HEADS)}")
    if load is load_cached and any(c.mode == "ft" for c in configs):  # before a worker starts, not inside one
        raise LayerfuseError("FT runs train the backbone, which a cache does not hold: pass "
                             "load=layerfuse.experiments.load_live")
    if keep_heads != "none" and any(c.mode == "ft" for c in configs):  # a head alone would export the untuned backbone
        raise LayerfuseError(f"keep_heads={keep_heads!r} with FT runs: an FT head needs its tuned backbone, "
                             "which a grid does not save; pass keep_heads='none' and train the winner with "
                             "`train-head --mode ft`")

    done = read_results(results, skipped=log)
    configs = defaults_named_once(entry, configs, recorded=done.values())
    key = entry.meta.get("key")
    refuse_other_entry(results, done.values(), entry)
    todo = [c for c in configs if run_id(c) not in done]
    check_samples(entry, todo)  # before any worker starts: a sample larger than train is one line
    check_warmups(entry, todo)
    check_dev_entities(entry, todo)  # a dev set without an entity: no F1, no best step
    if len(todo) < len(configs):
        log(f"{len(configs) - len(todo)} of {len(configs)} runs already in {results}; running the other {len(todo)}")
    bar = tqdm(total=len(configs), initial=len(configs) - len(todo), unit="run", desc="runs", disable=not progress)
    job = _Job(entry.path, load, per_run=load_per_run, annotate=annotate,
               heads=None if keep_heads == "none" else heads_dir(results), seen=dict(getattr(entry, "seen", {})),
               stamp=meta_stamp(entry.meta))
    claims = Claims(os.path.dirname(os.path.abspath(results))).start()
    try:
        if pack > 1:  # the members of a pack next to each other, claimed one by one, gathered back
            units = pack_runs(todo, pack)
            todo = [config for unit in units for config in unit]
            queue, run = packed(claimed(todo, claims, results=results, done=done, key=key, log=log), units), _run_pack
        else:
            queue, run = claimed(todo, claims, results=results, done=done, key=key, log=log), _run_one
        finished = _results(job, todo, queue, workers=workers, ray=ray, run=run, entry=entry)
        for config, record in _records(finished, pack > 1):
            record["cache_path"] = entry.path
            record = record_run(results, record, keep=keep_heads)
            claims.release(record["run_id"])  # in the file now: nobody needs the claim
            done[record["run_id"]] = record
            if on_record:
                on_record(config, record)
            bar.set_postfix_str(f"{config.fusion} n={config.shots} {_headline(record)}")
            bar.update(1)
    finally:
        claims.stop()  # a failed or interrupted run goes back to whoever comes next
        bar.close()
    for rid, r in read_results(results).items():  # others' runs, and the last word on what each kept
        if rid not in done or r.get("cache_key") == done[rid].get("cache_key"):
            done[rid] = r
    return {run_id(c): done[run_id(c)] for c in configs if run_id(c) in done}


def defaults_named_once(entry, configs: list[TrainConfig], recorded=()) -> list[TrainConfig]:
    """``configs`` with what the entry's backbone makes of a default, written out, as the default: its
    default layers however written (``1..L``, ``1-6``) and a fusion setting at the value its default
    picks by depth (``extra_layers=1`` on a 6-layer backbone), each run once: written out, they were
    other runs, trained again beside the default's and reported in a row of their own. A set of layers
    spelled otherwise than a ``recorded`` run (or an earlier config) spelled it takes that spelling
    (``5,4`` after ``4,5``; ``4-6`` after ``4..6``): one run and one row, the recorded ids unchanged.
    ``labels`` naming the entry's primary set is the run without it (``--labels ner`` on an NER entry)."""
    from ..cache.label_sets import primary_name
    from ..fusions.registry import declared_options
    from ..layers.spec import layer_set

    by_depth = {name: option.by_depth(entry.num_layers) for name, option in declared_options().items()
                if option.default is None and option.by_depth is not None}
    spelled: dict = {}  # what a set names -> its first spelling, recorded runs' first
    for layers in [(r.get("config") or {}).get("layers") for r in recorded] + [c.layers for c in configs]:
        if isinstance(layers, str) and layers:
            try:
                spelled.setdefault(layer_set(layers, num_layers=entry.num_layers), layers)
            except LayerfuseError:  # a record of another backbone's layers: it names no set of this one
                continue

    primary = primary_name(getattr(entry, "stored_meta", entry.meta))

    def canonical(c: TrainConfig) -> TrainConfig:
        if c.labels == primary:  # the primary set, named: the run without --labels
            c = replace(c, labels=None)
        if c.layers:
            named = layer_set(c.layers, num_layers=entry.num_layers)
            c = replace(c, layers=None if named is None else spelled.get(named, c.layers))
        written_out = {name: None for name, value in c.options if by_depth.get(name, object()) == value}
        return replace(c, **written_out) if written_out else c

    return list({run_id(c): c for c in map(canonical, configs)}.values())


def refuse_other_entry(results: str, records, entry) -> None:
    """A results file holds the runs of one cache entry: a run id does not name its entry, so another
    entry's run would be taken for this one's, done already, and the report would mix the two."""
    from ..cache.label_sets import fingerprints_of, listed, same_labels

    key = entry.meta.get("key")
    other = next((r for r in records if r.get("cache_key") not in (None, key)), None)
    if other is not None:
        raise LayerfuseError(f"{results} holds runs on another cache entry ({other.get('model')} on "
                             f"{other.get('dataset')}, {other.get('cache_path') or other['cache_key']}), not "
                             f"{entry.path}: give this grid another --out")
    # A relabelled set keeps the entry's key and the runs' ids: its earlier runs would pass for done ones,
    # and the report would average the two labellings in one cell.
    for r in records:
        name = r["config"].get("labels")
        now = fingerprints_of(entry.meta, name) if name in listed(entry.meta) else None
        if not same_labels(r.get("labels_fingerprints"), now):
            raise LayerfuseError(f"{results} holds runs on label set {name!r} as it was before it was relabelled "
                                 f"(run {r['run_id']}): give this grid another --out, or move that file away")


def _headline(record: dict) -> str:
    if record.get("best_dev_accuracy") is not None:
        return f"acc={f1_points(record['best_dev_accuracy'])}"
    if record.get("best_dev_ppl") is not None:
        return f"ppl={record['best_dev_ppl']:.2f}"
    return f"F1={f1_points(record['best_dev_f1'])}"


def _records(finished, packs: bool) -> Iterable[tuple]:
    """(config, record) of each run, from (config, record) or, for packs, (configs, records)."""
    for item, out in finished:
        yield from zip(item, out) if packs else ((item, out),)


def _results(job: _Job, todo, queue, *, workers: int | None, ray: str | None, run=None,
             entry=None) -> Iterable[tuple]:
    """(item, ``run(job, item)``) as items finish; ``queue`` yields the items (configs, or packs of them)
    this process claimed, or None while the only runs left are another sweep's (check back later).
    ``entry``: the sweep's opened entry, which runs in this process read (other processes open it once each)."""
    run = run or _run_one
    if not todo:
        return iter(())
    if ray:
        return _ray_results(job, todo, queue, ray, run)
    workers = min(usable_cores() if workers is None else workers, len(todo))
    if workers == 0:
        return _in_process(job, todo, queue, run, entry)
    return _local_results(job, todo, queue, workers, run)


# ----------------------------------------------------------------------------------------------
# Each executor loads the data once, then trains run after run from memory (unless per_run).


@dataclass(frozen=True)
class _Job:
    """What every executor needs besides the configs; picklable (loaders are top-level functions)."""

    cache_path: str
    load: Loader
    per_run: bool = False  # load(entry, [config]) for each run, timed into its record
    annotate: Annotate | None = None
    heads: str | None = None  # the folder each run writes its head into (the parent keeps or deletes it)
    # the entry's attributes as the sweep found it (`CacheEntry.with_meta`: the model folder named, the data's
    # reading): a worker opens the entry from its path, and its heads recorded the stored ones instead
    seen: dict | None = None
    # the entry's metadata as the sweep found it, hashed (`meta_stamp`): a process that loaded this path
    # for another sweep before (Ray reuses workers) loads again after a relabel or a new extraction
    stamp: str = ""


def meta_stamp(meta: dict) -> str:
    """A hash of an entry's metadata: its label sets' listing and fingerprints, its creation time."""
    return hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()


_DATA = None
_DATA_KEY = None
_ENTRY = None  # the entry this process's runs read: the sweep's own in its process, else opened once here


def _init_worker(job: _Job, configs: list, threads: int | None, entry=None) -> None:
    """Ready this process for ``configs``: ``entry`` is the sweep's opened entry when the runs train in
    the sweep's own process; a worker process opens ``job.cache_path`` itself, once."""
    global _DATA, _DATA_KEY, _ENTRY
    import torch

    from ..cache.reader import open_entry

    if threads:
        torch.set_num_threads(threads)
    key = (job.cache_path, job.stamp, job.load, job.per_run, tuple(run_id(c) for c in configs))
    if entry is not None:
        _ENTRY = entry
    elif _ENTRY is None or _DATA_KEY != key:  # Ray reuses worker processes across tasks and sweeps
        _ENTRY = open_entry(job.cache_path).with_meta(**(job.seen or {}))
    if _DATA_KEY != key:
        _DATA, _DATA_KEY = (None if job.per_run else job.load(_ENTRY, configs)), key


def _init_pool_worker(parent: int, job: _Job, configs: list, threads: int | None, slots=None) -> None:
    """A pool worker's initializer: it dies with ``parent`` (a sweep killed with SIGKILL leaves no
    worker blocked on its queue, holding its data), takes its GPU (`_take_gpu`), then loads as
    `_init_worker`."""
    from ..lifeline import die_with_parent, quiet_on_interrupt

    quiet_on_interrupt()
    die_with_parent(parent)
    global _INIT_ERROR
    try:
        if slots is not None:
            _take_gpu(slots)
        _init_worker(job, configs, threads)
    except Exception as exc:  # noqa: BLE001 -- an initializer that raises breaks the pool and loses the message
        _INIT_ERROR = exc


_INIT_ERROR = None  # what a pool worker's initializer raised; its first run raises it, the user sees the message


def _take_gpu(slots) -> None:
    """Worker i of a pool computes on GPU i mod n of a machine with n > 1 (``cuda``, a run's device
    when none is named, is the current one), so ``--workers`` spreads a sweep over the GPUs rather
    than stacking every worker on the first. ``slots``: a shared counter that numbers the workers."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 1:
        with slots.get_lock():
            index = slots.value
            slots.value += 1
        torch.cuda.set_device(index % torch.cuda.device_count())


def _after_init(run, job: _Job, item):
    """``run(job, item)`` in a pool worker, or the error that kept the worker from loading its data."""
    if _INIT_ERROR is not None:
        raise _INIT_ERROR
    return run(job, item)


def _run_one(job: _Job, config: TrainConfig) -> dict:
    from ..training.loop import train_head

    t0 = time.perf_counter()
    data = job.load(_ENTRY, [config]) if job.per_run else _DATA
    loaded = time.perf_counter()
    result = train_head(config, data, keep_head=job.heads is not None)
    if job.heads:
        save_run_head(result, data, config, folder=job.heads)
    record = result.to_dict()
    record["run_id"] = run_id(config)
    if job.per_run:  # the run's own reads are part of its cost
        record.update(load_seconds=loaded - t0, wall_seconds=time.perf_counter() - t0)
    if job.annotate:
        job.annotate(config, data, record)
    return record


def _run_pack(job: _Job, configs: tuple) -> list[dict]:
    """The records of a pack of runs (`train_pack`), in order; a pack of one is `_run_one`."""
    from ..training.packed import train_pack

    if len(configs) == 1:
        return [_run_one(job, configs[0])]
    records = []
    for config, result in zip(configs, train_pack(list(configs), _DATA, keep_head=job.heads is not None)):
        if job.heads:
            save_run_head(result, _DATA, config, folder=job.heads)
        record = result.to_dict()
        record["run_id"] = run_id(config)
        if job.annotate:
            job.annotate(config, _DATA, record)
        records.append(record)
    return records


def _in_process(job: _Job, todo, queue, run, entry):
    global _DATA, _DATA_KEY, _ENTRY
    import torch

    from ..training.runtime import run_threads

    before = torch.get_num_threads()
    _init_worker(job, todo, run_threads(), entry)  # as a pool worker runs: the same numbers
    try:
        for item in queue:
            if item is None:  # another sweep's runs are all that is left: wait for them
                time.sleep(POLL_S)
                continue
            yield item, run(job, item)
    finally:
        torch.set_num_threads(before)
        # the caller's entry and its data: its read hold and memory end when the caller lets it go, not with this
        # module, and a later sweep in this process loads afresh (after a relabel, the same runs' ids and path)
        _DATA = _DATA_KEY = _ENTRY = None


def _local_results(job: _Job, todo, queue, workers: int, run):
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from ..training.runtime import run_threads

    threads = run_threads()  # not the cores divided by the workers: a run's numbers never depend on the worker count
    context = multiprocessing.get_context("spawn")  # no fork after torch threads: portable and safe
    # runs named onto the CPU never touch CUDA (a device set is a context on that GPU)
    slots = context.Value("i", 0) if on_gpus({config.device for config in todo}) else None
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_pool_worker,
                             initargs=(os.getpid(), job, todo, threads, slots)) as pool:
        submit = lambda item: pool.submit(_after_init, run, job, item)  # noqa: E731
        processes = lambda: list((getattr(pool, "_processes", None) or {}).values())  # noqa: E731
        futures: dict = {}

        def finished(handles):
            done = wait(handles, timeout=POLL_S, return_when=FIRST_COMPLETED)[0]
            # A worker killed (the out-of-memory killer, a signal) right after it was spawned goes unseen by
            # the pool (Python 3.11 waits on the workers it had before), which then waits for ever.
            if not done and any(process.exitcode is not None for process in processes()):
                raise BrokenProcessPool("a worker process died")
            return done

        try:
            for config, future in _bounded(queue, futures, submit, workers, finished):
                yield config, future.result()
        except BaseException as exc:
            for f in futures:
                f.cancel()
            died = [p.exitcode for p in processes() if p.exitcode is not None]  # -9: killed by SIGKILL
            if isinstance(exc, (KeyboardInterrupt, BrokenProcessPool)):
                # Ctrl-C reached the workers too (one process group); a SIGTERM to this process alone did
                # not, nor a dead worker: they would finish their runs, unrecorded, while the pool's shutdown
                # waited on them.
                for process in processes():
                    process.terminate()
            # a worker killed: one line, not a traceback (its exit code, where this process saw it die first)
            if isinstance(exc, BrokenProcessPool) and (died or "terminated abruptly" in str(exc)):
                how = (f"exit {', '.join(map(str, died))}: killed by the out-of-memory killer or a signal when "
                       "negative" if died else "killed: the out-of-memory killer, or a signal")
                raise LayerfuseError(f"a worker process died mid-run ({how}); the runs recorded so far are kept: "
                                     "rerun the same command to go on") from None
            if isinstance(exc, BrokenProcessPool):  # no worker died (a result that could not be read back, say)
                raise LayerfuseError(f"the sweep's worker pool broke ({exc}); the runs recorded so far are kept") \
                    from None
            raise


def _bounded(queue, in_flight: dict, submit, capacity: int, finished):
    """Keep at most ``capacity`` runs in flight, claiming the next only when one finishes (so sweeps
    sharing a folder share its work); yields (config, handle) of each finished run.
    ``finished(handles)`` returns those done, waiting a little."""
    exhausted = False
    while in_flight or not exhausted:
        while not exhausted and len(in_flight) < capacity:
            config = next(queue, StopIteration)
            if config is StopIteration:
                exhausted = True
            elif config is None:  # only another sweep's runs left for now
                if not in_flight:
                    time.sleep(POLL_S)
                break
            else:
                in_flight[submit(config)] = config
        for handle in finished(list(in_flight)) if in_flight else ():
            yield in_flight.pop(handle), handle


def _ray_task(job: _Job, configs, item, run=_run_one):
    _init_worker(job, configs, 1)
    return run(job, item)


RAY_CONNECT_S = 10.0  # how long the cluster's address may take to answer before the sweep says so


def _check_reachable(address: str) -> None:
    """A cluster address (``host:port``, ``ray://host:port``) must accept a connection: Ray retries one
    that does not for ever, printing only its own lines. Other forms (``auto``) are left to Ray."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or not port:
        return
    try:
        socket.create_connection((host, port), timeout=RAY_CONNECT_S).close()
    except OSError as exc:
        raise LayerfuseError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc})") from None


def ray_resources(cluster: dict, *, devices: set) -> dict:
    """What one Ray task asks for: a CPU, and a GPU where the cluster has GPUs and the runs are left to
    the default device or named ``cuda`` (``devices``: the runs' `TrainConfig.device`). Ray hides the
    GPUs from a task that asks for none, so without it a GPU cluster would train on its CPUs; and it
    shows a task its one GPU as ``cuda``, so ``cuda:N`` is refused."""
    numbered = sorted(str(d) for d in devices if str(d).startswith("cuda:"))
    if numbered:
        raise OptionError(f"--device {numbered[0]}: a Ray task sees only the GPU it is given, as cuda; "
                              f"pass --device cuda (or leave it out)")
    return {"num_cpus": 1, "num_gpus": 1} if cluster.get("GPU", 0) >= 1 and on_gpus(devices) else {"num_cpus": 1}


def on_gpus(devices: set) -> bool:
    """Whether runs of these devices (`TrainConfig.device`, None for the default) go to the current
    GPU where there is one: the default or ``cuda``, not ``cpu`` or a numbered GPU."""
    return all(d is None or str(d) == "cuda" for d in devices)


def _ray_results(job: _Job, todo, queue, address: str, run):
    """Each run (or pack) a Ray task (one CPU, and one GPU on a GPU cluster: `ray_resources`); the
    cache is read from the shared root by each worker once."""
    try:
        import ray
    except ModuleNotFoundError:  # an extra, not a dependency
        raise LayerfuseError('sweeps on Ray need the package \'ray\', part of the ray extra: '
                              'pip install "layerfuse[ray]"') from None

    if not ray.is_initialized():
        local = address in (None, "", "local")
        if not local:
            _check_reachable(address)
        ray.init(address=None if local else address, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    cluster = ray.cluster_resources()
    resources = ray_resources(cluster, devices={config.device for config in todo})
    task = ray.remote(**resources)(_ray_task)
    capacity = max(1, int(cluster.get("GPU" if "num_gpus" in resources else "CPU", 1)))
    submit = lambda item: task.remote(job, todo, item, run)  # noqa: E731
    finished = lambda refs: ray.wait(refs, num_returns=1, timeout=POLL_S)[0]  # noqa: E731
    for config, ref in _bounded(queue, {}, submit, capacity, finished):
        yield config, ray.get(ref)


def run_sweep(entry, configs: list[TrainConfig], *, out: str, **options) -> dict[str, dict]:
    """`run_grid` with its results in ``out/results.jsonl`` (the `sweep` command's folder); ``options``
    are `run_grid`'s, ``workers=0`` among them: it trains in this process, reseeding torch's global
    generator as `train_head` does."""
    from .results import RESULTS

    os.makedirs(out, exist_ok=True)
    return run_grid(entry, configs, results=os.path.join(out, RESULTS), **options)
