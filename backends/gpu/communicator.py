"""The GPU communicator: collectives between GPUs of one host, one process per GPU.

Setup registers one device buffer per rank and maps every peer's over CUDA IPC. A call
selects a plan (or NCCL, where :func:`sdr.backends.collectives.select_algorithm` says NCCL is
faster and NCCL is available), lowers it for the call's size and launches the executor
kernel on the current CuPy stream. Calls can be captured in a CUDA graph once a call of
the same shape has run (that call may grow scratch, which synchronises the device).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from sdr.backends.collectives.dtypes import dtype_name
from sdr.backends.collectives.layout import Layout, LoweredOp, lower, make_layout
from sdr.backends.collectives.selection import NCCL, select_algorithm
from sdr.backends.gpu.executor import GpuExecutor, plan_blocks
from sdr.backends.gpu.memory import GpuMemoryChannel, GpuRegion
from sdr.backends.gpu.nccl import NcclComm, nccl_module
from sdr.collectives import build_plan
from sdr.collectives.plan import Plan
from sdr.errors import ConfigError

log = logging.getLogger(__name__)


@lru_cache(maxsize=512)
def _lowered(plan: Plan, rank: int, layout: Layout, in_place: bool) -> list[LoweredOp]:
    return lower(plan, rank, layout, in_place)


class GpuCommunicator:
    """Collectives over ``bootstrap.world_size`` GPUs; this rank uses ``device``."""

    def __init__(
        self,
        bootstrap: Any,
        device: int | None = None,
        *,
        scratch_bytes: int = 8 << 20,
        use_nccl: bool = True,
    ) -> None:
        import cupy as cp  # noqa: PLC0415 - optional dependency

        self.cp = cp
        self.bootstrap = bootstrap
        self.rank = bootstrap.rank
        self.world_size = bootstrap.world_size
        self.device = bootstrap.rank if device is None else device
        cp.cuda.Device(self.device).use()
        self.executor = GpuExecutor(self.rank, self.world_size, self.device)
        self.region: GpuRegion | None = None
        self._register(scratch_bytes, 2 * scratch_bytes)
        nccl = nccl_module() if use_nccl and self.world_size > 1 else None
        self.nccl = NcclComm(nccl, bootstrap) if nccl is not None else None

    def _register(self, scratch: int, packets: int) -> None:
        if self.region is not None:
            self.bootstrap.barrier()
            self.region.close()
        self.region = GpuRegion(self.bootstrap, self.device, scratch, packets)
        self.executor.attach(self.region)

    def channel(self, peer: int) -> GpuMemoryChannel:
        """A host-side memory channel to ``peer``."""
        assert self.region is not None
        return GpuMemoryChannel(self.region, peer, self.device)

    # running plans ---------------------------------------------------------------------
    def run_plan(self, plan: Plan, x: Any, out: Any, dtype: str) -> Any:
        """Run ``plan`` on contiguous CuPy arrays ``x`` -> ``out`` on the current stream."""
        if plan.world_size != self.world_size:
            raise ConfigError(f"plan {plan.name} is for {plan.world_size} ranks")
        layout = make_layout(plan, x.nbytes, out.nbytes, x.dtype.itemsize)
        assert self.region is not None
        if layout.scratch > self.region.scratch_cap or layout.packets > self.region.packets_cap:
            self._register(
                max(layout.scratch, self.region.scratch_cap),
                max(layout.packets, self.region.packets_cap),
            )
        in_place = x.data.ptr == out.data.ptr
        ops = _lowered(plan, self.rank, layout, in_place)
        # the grid comes from the ops without in-place savings: ranks may differ in that
        blocks = plan_blocks(plan, layout)
        prepared = self.executor.prepare((id(plan), layout, dtype, in_place), ops, blocks)
        self.executor.launch(prepared, x.data.ptr, out.data.ptr, dtype)
        return out

    def _choose(
        self, collective: str, nbytes: int, algorithm: str | None, root: int = 0
    ) -> Plan | NcclComm:
        """The plan that runs ``collective``, or the NCCL communicator where NCCL does."""
        name = algorithm or select_algorithm(
            collective, nbytes, self.world_size, nccl_available=self.nccl is not None
        )
        if name == NCCL:
            if self.nccl is None:
                raise ConfigError("algorithm 'nccl' asked for, but NCCL is not available")
            return self.nccl
        plan = build_plan(name, self.world_size, root)
        if plan.collective != collective:
            raise ConfigError(f"algorithm {name!r} implements {plan.collective}, not {collective}")
        return plan

    def _check(self, x: Any, out: Any, n_out: int, what: str) -> None:
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            raise ConfigError(f"{what}: buffers must be C-contiguous")
        if out.size != n_out or out.dtype != x.dtype:
            raise ConfigError(f"{what}: output {out.size} x {out.dtype}; expected {n_out}")

    def _stream(self) -> int:
        return int(self.cp.cuda.get_current_stream().ptr)

    # collectives -------------------------------------------------------------------------
    def allreduce(
        self, x: Any, out: Any = None, *, dtype: str | None = None, algorithm: str | None = None
    ) -> Any:
        """Elementwise sum over ranks (``out`` may be ``x``)."""
        dt = dtype_name(x.dtype, dtype)
        out = self.cp.empty_like(x) if out is None else out
        self._check(x, out, x.size, "allreduce")
        plan = self._choose("allreduce", x.nbytes, algorithm)
        if isinstance(plan, NcclComm):
            plan.allreduce(x, out, dt, self._stream())
            return out
        return self.run_plan(plan, x, out, dt)

    def allgather(
        self, x: Any, out: Any = None, *, dtype: str | None = None, algorithm: str | None = None
    ) -> Any:
        """Every rank's ``x`` concatenated in rank order."""
        dt = dtype_name(x.dtype, dtype)
        n = self.world_size
        out = self.cp.empty(x.size * n, x.dtype) if out is None else out
        self._check(x, out, x.size * n, "allgather")
        plan = self._choose("allgather", out.nbytes, algorithm)
        if isinstance(plan, NcclComm):
            plan.allgather(x, out, dt, self._stream())
            return out
        return self.run_plan(plan, x, out, dt)

    def reduce_scatter(
        self, x: Any, out: Any = None, *, dtype: str | None = None, algorithm: str | None = None
    ) -> Any:
        """Chunk ``rank`` of the elementwise sum; ``x.size`` must divide by world size."""
        dt = dtype_name(x.dtype, dtype)
        if x.size % self.world_size:
            raise ConfigError(f"reduce_scatter of {x.size} elements over {self.world_size} ranks")
        k = x.size // self.world_size
        out = self.cp.empty(k, x.dtype) if out is None else out
        self._check(x, out, k, "reduce_scatter")
        plan = self._choose("reduce_scatter", x.nbytes, algorithm)
        if isinstance(plan, NcclComm):
            plan.reduce_scatter(x, out, dt, self._stream())
            return out
        return self.run_plan(plan, x, out, dt)

    def broadcast(
        self, x: Any, root: int = 0, *, dtype: str | None = None, algorithm: str | None = None
    ) -> Any:
        """``root``'s ``x`` on every rank, in place."""
        dt = dtype_name(x.dtype, dtype)
        plan = self._choose("broadcast", x.nbytes, algorithm, root)
        if isinstance(plan, NcclComm):
            plan.broadcast(x, root, dt, self._stream())
            return x
        return self.run_plan(plan, x, x, dt)

    def check(self) -> None:
        """Synchronise and raise if an executor kernel timed out waiting for a peer."""
        self.executor.check()

    def close(self) -> None:
        """Free registered memory and close the bootstrap."""
        self.cp.cuda.Device(self.device).synchronize()
        self.bootstrap.barrier()
        if self.region is not None:
            self.region.close()
            self.region = None
        self.bootstrap.close()
