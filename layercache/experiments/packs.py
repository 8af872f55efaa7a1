"""Which runs of a grid train together (``sweep --pack K``): runs that differ in seed, N, learning
rate or epoch cap (`packed.OWN`), K at a time, as one stacked module (`layercache.training.packed`);
every other run is a pack of one.

Packs are formed from the runs left to do, and claimed run by run as before (`queue.claimed`), so
sweeps sharing a folder still share its work: a pack whose members another sweep has claimed trains
with the members this sweep got.
"""

from __future__ import annotations

from .results import run_id


def pack_runs(configs: list, size: int) -> list[tuple]:
    """``configs`` as packs of at most ``size`` runs that differ only in `packed.OWN`, each pack where
    its first run was, filled by the next such runs (the grid's cheapest-first order holds, and a pack's
    runs are as close in length as the grid allows); runs that cannot pack are packs of one."""
    from ..training.packed import can_pack, pack_key

    units: list[list] = []
    open_units: dict = {}  # pack key -> the pack still filling
    for config in configs:
        key = pack_key(config) if size > 1 and can_pack(config) else None
        unit = open_units.get(key) if key is not None else None
        if unit is None:
            unit = []
            units.append(unit)
            if key is not None:
                open_units[key] = unit
        unit.append(config)
        if key is not None and len(unit) == size:
            del open_units[key]
    return [tuple(unit) for unit in units]


def packed(queue, units: list[tuple]):
    """The claimed configs of ``queue`` (in the order of ``units``, flattened) gathered back into their
    packs: a tuple as soon as a pack is complete, or as soon as a run of another pack (or None: only
    other sweeps' runs are left) shows that the rest of it went to another sweep. None passes through."""
    unit_of = {run_id(c): i for i, unit in enumerate(units) for c in unit}
    current, index = [], None
    for config in queue:
        if config is not None and current and unit_of[run_id(config)] == index:
            current.append(config)
        else:
            if current:
                yield tuple(current)
                current = []
            if config is None:
                yield None
                continue
            current, index = [config], unit_of[run_id(config)]
        if len(current) == len(units[index]):
            yield tuple(current)
            current = []
    if current:
        yield tuple(current)
