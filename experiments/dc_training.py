"""Data-parallel training across emulated datacenters, and the same training on one site.

A tiny, seeded classification task (an MLP learning a fixed random teacher) trained with
SGD. The multi-site job runs ``datacenters x local_size`` processes; each trains
PyTorch DDP on its share of every global batch, with gradients averaged by the SDR
communication hook (shared memory inside a datacenter, SDR between). The single-site
reference trains the same model on the whole global batch in one process. With equal
shares, the averaged gradient equals the full-batch gradient, so the two loss curves must
agree up to float rounding (summation order).

Used by ``experiments/train_two_dcs.py`` and ``tests/test_ddp_hook.py``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from sdr.backends.hierarchical.local_job import run_ranks

__all__ = ["TrainSpec", "run_job", "train_single_site"]


@dataclass(frozen=True)
class TrainSpec:
    """The training task. ``bucket_mb`` caps DDP's gradient buckets (several per step)."""

    steps: int = 20
    batch: int = 64
    features: int = 32
    hidden: int = 256
    classes: int = 10
    lr: float = 0.1
    momentum: float = 0.9
    seed: int = 0
    bucket_mb: float = 0.1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return dataclasses.asdict(self)


def _model(spec: TrainSpec) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(spec.seed)
    return nn.Sequential(
        nn.Linear(spec.features, spec.hidden),
        nn.ReLU(),
        nn.Linear(spec.hidden, spec.hidden),
        nn.ReLU(),
        nn.Linear(spec.hidden, spec.classes),
    )


def _batches(spec: TrainSpec) -> list[tuple[Any, Any]]:
    """``steps`` global batches: inputs and the labels a fixed random teacher gives them."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed + 1)
    teacher = torch.randn(spec.features, spec.classes, generator=gen)
    out = []
    for _ in range(spec.steps):
        x = torch.randn(spec.batch, spec.features, generator=gen)
        out.append((x, (x @ teacher).argmax(dim=1)))
    return out


def train_single_site(spec: TrainSpec) -> list[float]:
    """Losses per step of the whole global batch trained in this process."""
    import torch

    torch.set_num_threads(1)
    model = _model(spec)
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
    losses = []
    for x, y in _batches(spec):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _train_rank(spec: TrainSpec, rank: int, job: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from sdr.backends.hierarchical import connect
    from sdr.backends.hierarchical.ddp_hook import register_sdr_hook

    torch.set_num_threads(1)
    world, local = job["world"], job["local_size"]
    os.environ["GLOO_SOCKET_IFNAME"] = job["ifnames"][rank // local]
    dist.init_process_group(
        "gloo", init_method=f"tcp://{job['master']}:{job['port']}", rank=rank, world_size=world
    )
    comm = connect(
        rank,
        world,
        local,
        master=job["master"],
        port=job["port"] + 10,
        host=job["hosts"][rank // local],
        options=job["options"],
        slices=job["slices"],
    )
    try:
        model = DistributedDataParallel(_model(spec), bucket_cap_mb=spec.bucket_mb)
        state = register_sdr_hook(model, comm)
        opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
        share = spec.batch // world
        losses, step_s = [], []
        for x, y in _batches(spec):
            start = time.perf_counter()
            lo, hi = rank * share, (rank + 1) * share
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[lo:hi]), y[lo:hi])
            loss.backward()  # the hook runs here, bucket by bucket
            opt.step()
            step_s.append(time.perf_counter() - start)
            losses.append(loss.item())
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        return {
            "rank": rank,
            "losses": losses,
            "step_s": step_s,
            "scheme": comm.links.scheme,
            "params": flat.numpy().copy(),
            "buckets": state.buckets,
            "hook_s": state.seconds,
            "wan_s": comm.timings["wan"],
            "intra_s": comm.timings["intra"],
            "counters": comm.links.counters(),
        }
    finally:
        comm.close()
        dist.destroy_process_group()


def run_job(
    spec: TrainSpec,
    *,
    datacenters: int,
    local_size: int,
    options: Any,
    port: int,
    hosts: list[str] | None = None,
    master: str = "127.0.0.1",
    namespaces: list[str] | None = None,
    ifnames: list[str] | None = None,
    slices: int = 2,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Train across ``datacenters x local_size`` forked processes; results by rank.

    ``hosts[d]``: the address of datacenter ``d`` (its SDR sockets bind there);
    ``namespaces[d]``: the network namespace its processes enter (None: this one);
    ``ifnames[d]``: the interface gloo uses there. Returns ``losses`` (mean over ranks,
    per step), ``step_s`` (slowest rank per step) and ``ranks`` (every rank's report).
    """
    world = datacenters * local_size
    if spec.batch % world:
        raise ValueError(f"batch {spec.batch} does not split over {world} ranks")
    job = {
        "world": world,
        "local_size": local_size,
        "port": port,
        "master": master,
        "hosts": hosts or ["127.0.0.1"] * datacenters,
        "ifnames": ifnames or ["lo"] * datacenters,
        "options": options,
        "slices": slices,
    }
    ranks = run_ranks(
        world,
        lambda rank: _train_rank(spec, rank, job),
        namespaces=[namespaces[r // local_size] for r in range(world)] if namespaces else None,
        timeout=timeout,
    )
    return {
        "losses": np.mean([r["losses"] for r in ranks], axis=0).tolist(),
        "step_s": np.max([r["step_s"] for r in ranks], axis=0).tolist(),
        "ranks": ranks,
    }
