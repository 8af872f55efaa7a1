"""Which runs of a grid train together (``sweep --pack K``): runs that differ in seed, N, learning
rate or epoch cap (`packed.OWN`), K at a time, as one stacked module (`layerfuse.training.packed`);
every other run is a pack of one.

Packs are formed from the runs left to do, and claimed run by run as before (`queue.claimed`), so
sweeps sharing a folder still share its work: a pack whose members another sweep has claimed trains
with the members this sweep got.
"""

from __future__ import annotations

from dataclasses import replace

from .results import run_id

CUDA_PACK_MAX = 20  # runs per pack on a GPU by default (a Figure-3 cell: 4 caps x 5 trials), fewer when its
# memory cannot hold them
PACK_MEMORY_SHARE = 0.25  # of the GPU's free memory, for the packed heads' weights, gradients and AdamW state


def default_pack(entry, configs: list, device) -> int:
    """``sweep``'s pack size when none is given: 1 on a CPU (where a pack was measured not to win:
    docs/results/bench_pack.md), on CUDA as many runs as ``PACK_MEMORY_SHARE`` of the free memory
    holds (16 bytes a parameter: weight, gradient, two AdamW moments), at most ``CUDA_PACK_MAX``."""
    import torch

    from ..fusions import parameter_budget
    from ..training.budget import free_bytes

    if torch.device(device).type != "cuda" or not configs:
        return 1
    meta = entry.meta
    shape = dict(n_layers=entry.num_layers, dim=entry.dim, num_heads=int(meta["num_heads"]),
                 ffn_dim=int(meta["ffn_dim"]), n_labels=len(entry.label_names))
    heads = {(c.fusion, tuple(c.head_options(entry.num_layers).items())) for c in configs}  # each head once
    params = max(parameter_budget(**shape, **dict(options))[fusion] for fusion, options in heads)
    fits = int(PACK_MEMORY_SHARE * free_bytes(device) // (16 * max(params, 1)))
    return max(1, min(CUDA_PACK_MAX, fits))


def pack_runs(configs: list, size: int) -> list[tuple]:
    """``configs`` as packs of at most ``size`` runs that differ only in `packed.OWN`, each pack where
    its first run was. A grid's cell (the same run but for its seed and epoch cap) that fits in one
    pack is one pack: its caps then train in the steps of the longest alone (a pack steps while any
    head has steps left), where packs by cap would step through every cap's steps one after another
    (Figure 3's caps 25, 50, 75 and 100: 100 epochs of steps, not 250). Otherwise runs on one
    schedule (the same run but for its seed: a grid's trials) pack together, split into packs as
    even as ``size`` allows: they share one AdamW and end on the same step (`PackOptimizer`). A run
    left alone by that (a grid of one trial) joins the next such runs in the grid's cheapest-first
    order, so a pack's runs are as close in length as the grid allows. Runs that cannot pack are
    packs of one."""
    from ..training.packed import can_pack

    if size <= 1:
        return [(config,) for config in configs]
    position = {id(config): i for i, config in enumerate(configs)}
    cells: dict = {}  # the run but for its seed and epoch cap -> its runs, in grid order
    units: list[list] = []
    for config in configs:
        if can_pack(config):
            cells.setdefault(replace(config, seed=0, epochs=0), []).append(config)
        else:
            units.append([config])
    schedules: dict = {}  # the run but for its seed -> its runs, in grid order
    whole = []  # the cells that fit in a pack, each kept whole
    for runs in cells.values():
        if len(runs) <= size and len({c.epochs for c in runs}) > 1:
            whole.append(runs)  # its caps share the longest one's steps (see the docstring)
            continue
        for config in runs:
            schedules.setdefault(replace(config, seed=0), []).append(config)
    alone = []
    for runs in schedules.values():
        n_packs = -(-len(runs) // size)
        for unit in (_even(runs, n_packs, i) for i in range(n_packs)):
            if len(unit) > 1:
                units.append(unit)
            else:
                alone += unit
    units += _filled(whole, size)
    units += _filled([[c] for c in sorted(alone, key=lambda c: position[id(c)])], size)
    units.sort(key=lambda unit: position[id(unit[0])])
    return [tuple(unit) for unit in units]


def _filled(groups: list[list], size: int) -> list[list]:
    """``groups`` (in order, each kept whole) gathered into packs of at most ``size`` runs of one pack
    key: a group joins the pack still filling when it fits there, else starts the next one."""
    from ..training.packed import pack_key

    units, filling = [], {}  # pack key -> the pack still filling
    for group in groups:
        key = pack_key(group[0])
        unit = filling.get(key)
        if unit is None or len(unit) + len(group) > size:
            unit = filling[key] = []
            units.append(unit)
        unit += group
        if len(unit) == size:
            del filling[key]
    return units


def _even(runs: list, n_packs: int, i: int) -> list:
    """The ``i``-th of ``n_packs`` consecutive slices of ``runs``, their sizes differing by one at most
    (the larger first)."""
    bounds = [-(-len(runs) * j // n_packs) for j in range(n_packs + 1)]
    return runs[bounds[i]:bounds[i + 1]]


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
