"""The CPU communicator: collectives between processes through shared memory and NumPy.

Every rank registers one shared-memory segment (:class:`~sdr.backends.shm.memory.Region`),
exchanges its name through the bootstrap and maps every peer's. A collective call picks a
plan (:func:`sdr.backends.collectives.select_algorithm`, or the caller's choice), lowers it to
bytes for the call's size and runs it. When a call needs more scratch than registered,
every rank grows its segment in step (sizes are the same on every rank, so all ranks
decide alike) and the names are exchanged again.
"""

from __future__ import annotations

import logging
import secrets
from functools import lru_cache

import numpy as np

from sdr.backends.collectives.dtypes import dtype_name, storage_dtype
from sdr.backends.collectives.layout import Layout, LoweredOp, lower, make_layout
from sdr.backends.collectives.selection import select_algorithm
from sdr.backends.shm.bootstrap import TcpBootstrap
from sdr.backends.shm.executor import ShmExecutor
from sdr.backends.shm.memory import Check, Region, ShmMemoryChannel
from sdr.collectives import build_plan
from sdr.collectives.plan import Plan
from sdr.errors import ConfigError

log = logging.getLogger(__name__)


@lru_cache(maxsize=512)
def _lowered(plan: Plan, rank: int, layout: Layout, in_place: bool) -> list[LoweredOp]:
    return lower(plan, rank, layout, in_place)


class ShmCommunicator:
    """Collectives for ``bootstrap.world_size`` processes on one host (see module docs).

    ``timeout``: the bound of every wait, in seconds. ``check``: asked while a wait backs
    off; whatever it raises ends the wait (a caller that learns another way that a peer is
    gone stops waiting for it at once)."""

    def __init__(
        self,
        bootstrap: TcpBootstrap,
        *,
        scratch_bytes: int = 1 << 20,
        timeout: float = 60.0,
        check: Check | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.rank = bootstrap.rank
        self.world_size = bootstrap.world_size
        self.timeout = timeout
        self.check = check
        self._token = bootstrap.broadcast(secrets.token_hex(4))
        self._generation = 0
        self._regions: list[Region] = []
        self._executor: ShmExecutor | None = None
        self._register(scratch_bytes, scratch_bytes * 2)

    # registration ----------------------------------------------------------------------
    def _register(self, scratch: int, packets: int) -> None:
        """Create this rank's segment and map every peer's (collective)."""
        seq = self._executor.seq if self._executor else 0
        self._close_regions()
        self._generation += 1
        name = f"sdr{self._token}g{self._generation}r{self.rank}"
        mine = Region(name, self.world_size, scratch, packets, create=True)
        names = self.bootstrap.all_gather(name)
        regions = [
            mine if r == self.rank else Region(n, self.world_size, scratch, packets, create=False)
            for r, n in enumerate(names)
        ]
        self._regions = regions
        channels = {
            p: ShmMemoryChannel(self.rank, p, mine, regions[p], self.timeout, self.check)
            for p in range(self.world_size)
            if p != self.rank
        }
        self._executor = ShmExecutor(self.rank, mine, channels, self.check)
        self._executor.seq = seq
        self.bootstrap.barrier()  # every rank attached before the creator may be written
        mine.unlink()  # all mapped: the name is no longer needed, and a crash cannot leak it
        log.debug("rank %d registered %d B scratch, %d B packets", self.rank, scratch, packets)

    def _ensure(self, layout: Layout) -> None:
        region = self._regions[self.rank]
        if layout.scratch > region.scratch_cap or layout.packets > region.packets_cap:
            self._register(
                max(layout.scratch, region.scratch_cap), max(layout.packets, region.packets_cap)
            )

    # running plans ---------------------------------------------------------------------
    def run_plan(self, plan: Plan, x: np.ndarray, out: np.ndarray, dtype: str) -> np.ndarray:
        """Run ``plan`` with input ``x`` and output ``out`` (C-contiguous); returns ``out``."""
        if plan.world_size != self.world_size:
            raise ConfigError(
                f"plan {plan.name} is for {plan.world_size} ranks, not {self.world_size}"
            )
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            raise ConfigError("collective buffers must be C-contiguous")
        itemsize = storage_dtype(dtype).itemsize
        layout = make_layout(plan, x.nbytes, out.nbytes, itemsize)
        self._ensure(layout)
        assert self._executor is not None
        inp = x.reshape(-1).view(np.uint8)
        outb = out.reshape(-1).view(np.uint8)
        ops = _lowered(plan, self.rank, layout, x.ctypes.data == out.ctypes.data)
        self._executor.run(ops, inp, outb, dtype, self.timeout)
        return out

    def _plan(self, collective: str, nbytes: int, algorithm: str | None, root: int = 0) -> Plan:
        name = algorithm or select_algorithm(collective, nbytes, self.world_size)
        plan = build_plan(name, self.world_size, root)
        if plan.collective != collective:
            raise ConfigError(f"algorithm {name!r} implements {plan.collective}, not {collective}")
        return plan

    # collectives -------------------------------------------------------------------------
    def allreduce(
        self,
        x: np.ndarray,
        out: np.ndarray | None = None,
        *,
        dtype: str | None = None,
        algorithm: str | None = None,
    ) -> np.ndarray:
        """Elementwise sum over ranks; ``out`` may be ``x`` (in place)."""
        dt = dtype_name(x.dtype, dtype)
        out = np.empty_like(x) if out is None else out
        _same_shape(x.size, out.size, "allreduce output")
        return self.run_plan(self._plan("allreduce", x.nbytes, algorithm), x, out, dt)

    def allgather(
        self,
        x: np.ndarray,
        out: np.ndarray | None = None,
        *,
        dtype: str | None = None,
        algorithm: str | None = None,
    ) -> np.ndarray:
        """Concatenation of every rank's ``x`` in rank order."""
        dt = dtype_name(x.dtype, dtype)
        out = np.empty(x.size * self.world_size, x.dtype) if out is None else out
        _same_shape(x.size * self.world_size, out.size, "allgather output")
        return self.run_plan(self._plan("allgather", out.nbytes, algorithm), x, out, dt)

    def reduce_scatter(
        self,
        x: np.ndarray,
        out: np.ndarray | None = None,
        *,
        dtype: str | None = None,
        algorithm: str | None = None,
    ) -> np.ndarray:
        """Chunk ``rank`` of the elementwise sum; ``x.size`` must divide by world size."""
        dt = dtype_name(x.dtype, dtype)
        if x.size % self.world_size:
            raise ConfigError(f"reduce_scatter of {x.size} elements over {self.world_size} ranks")
        n = x.size // self.world_size
        out = np.empty(n, x.dtype) if out is None else out
        _same_shape(n, out.size, "reduce_scatter output")
        return self.run_plan(self._plan("reduce_scatter", x.nbytes, algorithm), x, out, dt)

    def broadcast(
        self,
        x: np.ndarray,
        root: int = 0,
        *,
        dtype: str | None = None,
        algorithm: str | None = None,
    ) -> np.ndarray:
        """``root``'s ``x`` on every rank, written into ``x``."""
        dt = dtype_name(x.dtype, dtype)
        return self.run_plan(self._plan("broadcast", x.nbytes, algorithm, root), x, x, dt)

    def barrier(self) -> None:
        """Host barrier through the bootstrap."""
        self.bootstrap.barrier()

    def channel(self, peer: int) -> ShmMemoryChannel:
        """This rank's memory channel to ``peer`` (put/get/signal/wait/flush/LL packets)."""
        if self._executor is None or peer not in self._executor.channels:
            raise ConfigError(f"rank {self.rank} has no channel to rank {peer}")
        return self._executor.channels[peer]

    @property
    def region(self) -> Region:
        """This rank's registered region (scratch and packet halves, semaphores)."""
        return self._regions[self.rank]

    def close(self) -> None:
        """Unmap and unlink shared memory (peers keep their mappings), close the bootstrap."""
        self._close_regions()
        self.bootstrap.close()

    def _close_regions(self) -> None:
        if self._executor is not None:
            self._executor.channels.clear()
        for r in self._regions:
            r.close()
        self._regions = []


def _same_shape(expected: int, got: int, what: str) -> None:
    if expected != got:
        raise ConfigError(f"{what} has {got} elements; expected {expected}")
