"""Where a sweep's runs compute on a machine or cluster with GPUs: pool workers spread over the
GPUs, and a Ray task asks for a GPU (Ray hides the GPUs from a task that asks for none)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from layerfuse.errors import LayerfuseError
from layerfuse.experiments.runner import _take_gpu, on_gpus, ray_resources


@pytest.mark.parametrize("cluster, devices, expected", [
    ({"CPU": 8.0}, {None}, {"num_cpus": 1}),
    ({"CPU": 8.0, "GPU": 4.0}, {None}, {"num_cpus": 1, "num_gpus": 1}),
    ({"CPU": 8.0, "GPU": 4.0}, {"cuda"}, {"num_cpus": 1, "num_gpus": 1}),
    ({"CPU": 8.0, "GPU": 4.0}, {"cpu"}, {"num_cpus": 1}),  # runs named onto the CPU keep the GPUs free
    ({"CPU": 8.0, "GPU": 4.0}, {None, "cpu"}, {"num_cpus": 1}),
])
def test_a_ray_task_asks_for_a_gpu_on_a_gpu_cluster(cluster, devices, expected):
    assert ray_resources(cluster, devices=devices) == expected


def test_a_numbered_gpu_is_refused_on_ray_and_keeps_a_local_worker_where_it_is():
    """A Ray task sees its one GPU as cuda: cuda:1 there is an invalid ordinal, said before any run."""
    with pytest.raises(LayerfuseError, match="--device cuda:1: a Ray task sees only the GPU it is given"):
        ray_resources({"CPU": 8.0, "GPU": 4.0}, devices={"cuda:1"})
    assert on_gpus({None, "cuda"}) and not on_gpus({"cuda:1"}) and not on_gpus({"cpu"})


@pytest.mark.parametrize("count, expected", [(3, [0, 1, 2, 0]), (1, [])])
def test_pool_workers_take_the_gpus_in_turn(monkeypatch, count, expected):
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    slots = multiprocessing.get_context("spawn").Value("i", 0)
    for _ in range(4):  # four workers' initializers
        _take_gpu(slots)
    assert chosen == expected  # one GPU: every worker on it, as before
