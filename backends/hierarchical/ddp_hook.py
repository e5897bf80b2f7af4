"""PyTorch DDP communication hook: gradient allreduce through the hierarchical communicator.

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from sdr.backends.hierarchical import connect_from_env
    from sdr.backends.hierarchical.ddp_hook import register_sdr_hook

    dist.init_process_group("gloo")          # DDP still needs a process group (set-up only)
    comm = connect_from_env()                # intra-datacenter shm + SDR across datacenters
    model = DDP(net)
    register_sdr_hook(model, comm)           # every gradient bucket goes through SDR

DDP hands the hook one flattened gradient bucket (:class:`torch.distributed.GradBucket`)
at a time, in the order gradients become ready during backward. The hook sums the bucket
over all ranks (reduce-scatter inside the datacenter, SDR allreduce of a shard across
datacenters, allgather inside), divides by the world size as DDP's default hook does, and
returns a completed future. Supported bucket types: float32, float16 and bfloat16. CUDA
buckets stay on the GPU for the intra-datacenter phases when the communicator's intra
part is a GPU communicator (only the WAN shard is staged through host memory); otherwise
they are staged to host memory whole.
"""

# No ``from __future__ import annotations``: DDP checks the hook's annotations as objects.
import logging
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from sdr.backends.hierarchical.communicator import HierarchicalCommunicator
from sdr.errors import ConfigError

__all__ = ["SdrHookState", "register_sdr_hook", "sdr_allreduce_hook"]

log = logging.getLogger(__name__)

_NUMPY_VIEW = {
    torch.float32: (torch.float32, "float32"),
    torch.float16: (torch.float16, "float16"),
    torch.bfloat16: (torch.int16, "bfloat16"),  # NumPy has no bfloat16: raw 16-bit storage
}


class SdrHookState:
    """What the hook needs: the communicator, plus counters for reports."""

    def __init__(self, comm: HierarchicalCommunicator) -> None:
        self.comm = comm
        self.buckets = 0
        self.bytes = 0
        self.seconds = 0.0


def _as_numpy(t: torch.Tensor) -> tuple[np.ndarray, str]:
    if t.dtype not in _NUMPY_VIEW:
        raise ConfigError(f"gradient dtype {t.dtype}; expected float32, float16 or bfloat16")
    view_dtype, name = _NUMPY_VIEW[t.dtype]
    arr = t.view(view_dtype).numpy()
    if name == "bfloat16":
        arr = arr.view(np.uint16)
    return arr, name


def sdr_allreduce_hook(
    state: SdrHookState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Average ``bucket`` over every rank through SDR (a DDP communication hook)."""
    grads = bucket.buffer()
    start = time.perf_counter()
    if grads.device.type == "cuda" and _gpu_intra(state.comm):
        import cupy  # noqa: PLC0415 - present whenever the intra communicator is a GPU one

        flat = grads.detach()
        arr = cupy.from_dlpack(flat.view(_NUMPY_VIEW[flat.dtype][0]))
        dtype = _NUMPY_VIEW[flat.dtype][1]
        if dtype == "bfloat16":
            arr = arr.view(cupy.uint16)
        state.comm.allreduce(arr, out=arr, dtype=dtype)  # intra on the GPUs, shard via host
        flat.div_(state.comm.world_size)
        return _done(state, grads, start)
    host = grads.detach()
    staged = host.device.type != "cpu" or not host.is_contiguous()
    if staged:
        host = host.to("cpu").contiguous()
    arr, dtype = _as_numpy(host)
    state.comm.allreduce(arr, out=arr, dtype=dtype)
    host.div_(state.comm.world_size)
    if staged:
        grads.copy_(host)
    return _done(state, grads, start)


def _gpu_intra(comm: HierarchicalCommunicator) -> bool:
    return type(comm.intra).__module__.startswith("sdr.backends.gpu")


def _done(
    state: SdrHookState, grads: torch.Tensor, start: float
) -> torch.futures.Future[torch.Tensor]:
    state.buckets += 1
    state.bytes += grads.numel() * grads.element_size()
    state.seconds += time.perf_counter() - start
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(grads)
    return fut


def register_sdr_hook(model: Any, comm: HierarchicalCommunicator) -> SdrHookState:
    """Register :func:`sdr_allreduce_hook` on a DistributedDataParallel ``model``."""
    state = SdrHookState(comm)
    model.register_comm_hook(state, sdr_allreduce_hook)
    return state
