"""`sweep`'s pack size when none is given: one run at a time on a CPU, packs sized by the GPU's
free memory on CUDA."""

from __future__ import annotations

from layerfuse.cache.reader import open_entry
from layerfuse.experiments import packs
from layerfuse.fusions import parameter_budget
from layerfuse.training import TrainConfig, budget


def test_a_cpu_packs_nothing_and_a_gpu_packs_what_its_memory_holds(tiny_cache, monkeypatch):
    entry = open_entry(tiny_cache)
    configs = [TrainConfig(fusion=f, shots=4, epochs=2, seed=s) for f in ("concat", "extra") for s in range(3)]
    assert packs.default_pack(entry, configs, "cpu") == 1
    monkeypatch.setattr(budget, "free_bytes", lambda device=None: 80 << 30)
    assert packs.default_pack(entry, configs, "cuda") == packs.CUDA_PACK_MAX
    meta = entry.meta
    params = max(parameter_budget(n_layers=entry.num_layers, dim=entry.dim, num_heads=int(meta["num_heads"]),
                                  ffn_dim=int(meta["ffn_dim"]), n_labels=len(entry.label_names),
                                  extra_layers=1).values())
    room = 3 * 16 * params / packs.PACK_MEMORY_SHARE  # three runs' weights, gradients and AdamW state
    monkeypatch.setattr(budget, "free_bytes", lambda device=None: int(room))
    assert packs.default_pack(entry, configs, "cuda") == 3
    monkeypatch.setattr(budget, "free_bytes", lambda device=None: 0)
    assert packs.default_pack(entry, configs, "cuda") == 1
