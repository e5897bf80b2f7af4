"""Hierarchical allreduce with a GPU datacenter: CUDA IPC inside, SDR to a CPU datacenter.

Datacenter 0 is two GPU ranks (GPU communicator, CuPy arrays, the shard staged to host
memory for the WAN); datacenter 1 is two CPU ranks (shared memory). Skipped without CuPy
and two CUDA devices.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from sdr.backends.gpu import cuda_available
from sdr.backends.hierarchical import SdrLinkOptions, connect
from sdr.backends.hierarchical.local_job import run_ranks
from sdr.backends.shm import free_port

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(2), reason="needs CuPy and >= 2 CUDA devices"),
]

SIZES = (1, 4097, 1 << 20)


def _data(rank: int, n: int) -> np.ndarray:
    return np.random.default_rng(rank * 11 + n).standard_normal(n).astype(np.float32)


def _rank(port: int, rank: int) -> list[np.ndarray]:
    gpu = rank < 2
    opts = SdrLinkOptions(scheme="ec-xor", rtt="2ms", rate="4Gbit/s", timeout=60)
    comm = connect(rank, 4, 2, port=port, options=opts, device=rank if gpu else None)
    try:
        outs = []
        for n in SIZES:
            x = _data(rank, n)
            if gpu:
                import cupy

                outs.append(comm.allreduce(cupy.asarray(x)).get())
            else:
                outs.append(comm.allreduce(x))
        return outs
    finally:
        comm.close()


def test_gpu_and_cpu_datacenters_allreduce() -> None:
    results = run_ranks(4, functools.partial(_rank, free_port()), timeout=300, start_method="spawn")
    for i, n in enumerate(SIZES):
        ref = np.sum([_data(r, n) for r in range(4)], axis=0)
        for r in range(4):
            np.testing.assert_allclose(results[r][i], ref, rtol=1e-5, atol=1e-5)


class _Bucket:
    """The part of torch.distributed.GradBucket the hook uses."""

    def __init__(self, tensor: object) -> None:
        self._tensor = tensor

    def buffer(self) -> object:
        return self._tensor


def _hook_rank(port: int, rank: int) -> np.ndarray:
    import torch

    from sdr.backends.hierarchical.ddp_hook import SdrHookState, sdr_allreduce_hook

    gpu = rank < 2
    opts = SdrLinkOptions(scheme="sr-nack", rtt="2ms", rate="4Gbit/s", timeout=60)
    comm = connect(rank, 4, 2, port=port, options=opts, device=rank if gpu else None)
    try:
        grads = torch.from_numpy(_data(rank, 10_001)).to(f"cuda:{rank}" if gpu else "cpu")
        fut = sdr_allreduce_hook(SdrHookState(comm), _Bucket(grads))
        out = fut.wait()
        assert out.data_ptr() == grads.data_ptr()  # averaged in place, on its device
        return out.cpu().numpy()
    finally:
        comm.close()


def test_ddp_hook_on_cuda_buckets() -> None:
    pytest.importorskip("torch")
    results = run_ranks(
        4, functools.partial(_hook_rank, free_port()), timeout=300, start_method="spawn"
    )
    ref = np.sum([_data(r, 10_001) for r in range(4)], axis=0) / 4
    for r in range(4):
        np.testing.assert_allclose(results[r], ref, rtol=1e-5, atol=1e-6)
