"""Finding the cache entry a head trains on: `--cache PATH`, else the entry that `extract` would
make for `--model/--dataset` (extracting it first when missing), else the newest complete entry."""

from __future__ import annotations

from ..cache.layout import cache_root
from ..cache.manage import latest_complete
from ..cache.reader import CacheEntry, open_entry
from ..errors import LayercacheError


def resolve_entry(*, cache: str | None = None, model: str | None = None, dataset: str | None = None,
                  cache_dir: str | None = None, extract_options: dict | None = None, log=print) -> CacheEntry:
    if cache:
        return open_entry(cache)
    if model or dataset:
        from ..extract.run import ExtractConfig, extract  # only this path needs transformers

        config = ExtractConfig(model=model, dataset=dataset or "wnut16", cache_dir=cache_dir,
                               **(extract_options or {}))
        result = extract(config, progress=True, log=log)
        if not all(s.reused for s in result.splits):
            log(f"extracted {result.path}")
        return open_entry(result.path)
    root = cache_root(cache_dir)
    latest = latest_complete(root)
    if latest is None:
        raise LayercacheError(f"no complete cache entry under {root}; run `extract` first or pass --cache PATH")
    log(f"using the newest cache entry: {latest.path}")
    return open_entry(latest.path)
