"""`sweep`: the paper's few-shot grid (fusion x N-shot x epoch cap x trial) over one cache.

Every run is one `train_head` call, the function `train-head` uses. Runs go to worker processes
(one per core by default), each of which reads the cache once and keeps it in memory. Finished runs
are appended to one JSON-lines file by the parent process alone, each line flushed and fsync'ed, so
a killed sweep loses at most the runs in flight; a rerun skips every run already in the file, and
a widened grid runs only what is new.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import MISSING, asdict, replace
from dataclasses import fields as dataclass_fields
from itertools import product

from ..errors import LayercacheError
from .train import TrainConfig

RESULTS = "results.jsonl"


def grid(*, fusions, shots, epochs, trials: int, base: TrainConfig) -> list[TrainConfig]:
    """Every run of the grid, cheapest first (so early results arrive early); trial t uses seed t."""
    runs = [replace(base, fusion=f, shots=n, epochs=e, seed=t)
            for f, n, e, t in product(fusions, shots, epochs, range(trials))]
    return sorted(runs, key=lambda c: ((c.shots or 10**9) * c.epochs, c.fusion, c.seed))


def run_id(config: TrainConfig | dict) -> str:
    """Names a run by everything that changes its result: the fields that differ from their
    defaults (so a field added in a later version, at its default, keeps old ids), device aside."""
    given = asdict(config) if not isinstance(config, dict) else config
    fields = {f.name: given[f.name] for f in dataclass_fields(TrainConfig)
              if f.name in given and f.name != "device" and (f.default is MISSING or given[f.name] != f.default)}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]
    return f"{given['fusion']}-n{given['shots'] or 'all'}-e{given['epochs']}-s{given['seed']}-{digest}"


def read_results(path: str) -> dict[str, dict]:
    """Records by run id. A line cut short by a kill (no newline, bad JSON) is dropped and cut
    from the file, so the next append starts on a fresh line."""
    if not os.path.exists(path):
        return {}
    records, good_bytes = {}, 0
    with open(path, "rb") as f:
        for raw in f:
            try:
                record = json.loads(raw)
            except ValueError:
                break
            if not raw.endswith(b"\n"):
                break
            if "config" in record:  # recomputed, so the ids of records from older versions still match
                record["run_id"] = run_id(record["config"])
            records[record["run_id"]] = record
            good_bytes += len(raw)
    if good_bytes < os.path.getsize(path):
        with open(path, "r+b") as f:
            f.truncate(good_bytes)
    return records


def runs_on(path: str, cache_key: str | None) -> dict[str, dict]:
    """The records of ``path`` made on the cache entry ``cache_key``, by run id (for results files
    that may hold runs on several caches)."""
    return {rid: r for rid, r in read_results(path).items() if r.get("cache_key") == cache_key}


def append_result(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------
# Workers: each process reads the cache once, then trains run after run from memory.

_DATA = None
_DATA_KEY = None


def _init_worker(cache_path: str, layers: list[int] | None, threads: int) -> None:
    global _DATA, _DATA_KEY
    import torch

    from ..cache.reader import open_entry
    from .data import load_data

    torch.set_num_threads(threads)
    if _DATA_KEY != (cache_path, layers):  # Ray reuses worker processes across tasks and sweeps
        _DATA = load_data(open_entry(cache_path), layers=layers)
        _DATA_KEY = (cache_path, layers)


def _run_one(config: TrainConfig) -> dict:
    from .train import train_head

    result = train_head(config, _DATA, keep_tagger=False)  # a sweep keeps records, not weights
    record = result.to_dict()
    record["run_id"] = run_id(config)
    return record


def layers_to_load(configs: list[TrainConfig], num_layers: int) -> list[int] | None:
    """The union of the layers the runs may fuse (None = 1..L, also what auto:K ranks)."""
    from .data import parse_layer_spec

    wanted: set[int] = set()
    for c in configs:
        spec = parse_layer_spec(c.layers, num_layers=num_layers)
        wanted.update(spec.candidates)
    return sorted(wanted)


def _ray_task(cache_path: str, layers, threads: int, config: TrainConfig) -> dict:
    _init_worker(cache_path, layers, threads)
    return _run_one(config)


def _ray_results(entry, todo, layers, address: str):
    """Each run a Ray task (one CPU); the cache is read from the shared root by each worker once."""
    import ray

    if not ray.is_initialized():
        ray.init(address=None if address in (None, "", "local") else address, include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)
    task = ray.remote(num_cpus=1)(_ray_task)
    pending = {task.remote(entry.path, layers, 1, c): c for c in todo}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        config = pending.pop(ready[0])
        yield config, ray.get(ready[0])


def _local_results(entry, todo, layers, workers: int):
    from concurrent.futures import ProcessPoolExecutor, as_completed
    import multiprocessing

    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")  # no fork after torch threads: portable and safe
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                             initargs=(entry.path, layers, threads)) as pool:
        futures = {pool.submit(_run_one, c): c for c in todo}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def run_sweep(entry, configs: list[TrainConfig], *, out: str, workers: int | None = None, progress: bool = True,
              ray: str | None = None, log=print) -> dict[str, dict]:
    """Run every config not yet in `out/results.jsonl`; returns all records of this grid. With
    `ray` (an address, or "local") every run is a Ray task instead of a local process."""
    from tqdm.auto import tqdm

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, RESULTS)
    done = read_results(path)
    todo = [c for c in configs if run_id(c) not in done]
    if len(todo) < len(configs):
        log(f"{len(configs) - len(todo)} of {len(configs)} runs already in {path}; running the other {len(todo)}")
    if not todo:
        return {run_id(c): done[run_id(c)] for c in configs}
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    layers = layers_to_load(todo, entry.num_layers)
    bar = tqdm(total=len(configs), initial=len(configs) - len(todo), unit="run", desc="sweep", disable=not progress)
    results = _ray_results(entry, todo, layers, ray) if ray else _local_results(entry, todo, layers, workers)
    for config, record in results:
        record["cache_path"] = entry.path
        append_result(path, record)
        done[record["run_id"]] = record
        bar.set_postfix_str(f"{config.fusion} n={config.shots} F1={record['best_dev_f1']:.3f}")
        bar.update(1)
    bar.close()
    return {run_id(c): done[run_id(c)] for c in configs}


def parse_list(text: str, *, name: str, cast=int) -> list:
    try:
        values = [cast(x.strip()) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise LayercacheError(f"--{name} {text!r} is not a comma-separated list") from None
    if not values:
        raise LayercacheError(f"--{name} is empty")
    return values
