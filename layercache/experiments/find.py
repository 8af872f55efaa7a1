"""Finding the cache entry a head trains on: `--cache PATH`, else the entry that `extract` would
make for `--model/--dataset` (extracting it first when missing), else the newest complete entry of
the task."""

from __future__ import annotations

from ..cache.layout import cache_root
from ..cache.manage import list_entries
from ..cache.reader import CacheEntry, open_entry
from ..errors import LayercacheError


def resolve_entry(*, cache: str | None = None, model: str | None = None, dataset: str | None = None,
                  cache_dir: str | None = None, extract_options: dict | None = None, log=print) -> CacheEntry:
    """``extract_options``: more `ExtractConfig` fields (MLM: ``task``, ``block_size``, ...)."""
    if cache:
        return open_entry(cache)
    options = dict(extract_options or {})
    task = options.get("task", "ner")
    if model or dataset:
        from ..extract.run import ExtractConfig, extract  # only this path needs transformers

        config = ExtractConfig(model=model, dataset=dataset or ("wnut16" if task == "ner" else None),
                               cache_dir=cache_dir, **options)
        result = extract(config, progress=True, log=log)
        if not all(s.reused for s in result.splits):
            log(f"extracted {result.path}")
        return open_entry(result.path)
    root = cache_root(cache_dir)
    latest = next((e for e in list_entries(root) if e.complete and _task(e.path) == task), None)
    if latest is None:
        raise LayercacheError(f"no complete {task} cache entry under {root}; run `extract"
                              f"{'' if task == 'ner' else ' --task ' + task}` first or pass --cache PATH")
    log(f"using the newest {task} cache entry: {latest.path}")
    return open_entry(latest.path)


def _task(path: str) -> str | None:
    try:
        return open_entry(path).meta.get("task", "ner")
    except LayercacheError:
        return None
