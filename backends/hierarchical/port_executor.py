"""Runs a collective plan whose channels are SDR port channels (one rank per datacenter).

The same plans, layout and lowering as the memory-channel executors (``backends/shm``),
with puts that are reliable SDR writes, run by the same interpreter
(:class:`~sdr.backends.collectives.interpreter.OpInterpreter`), so reductions match the CPU
executor's bit for bit. What is the port channels' own is here: before running its own
ops, a rank lowers each peer's ops for the call and posts the receives those peers' puts
will land in (see :mod:`sdr.backends.hierarchical.port_channel`).
"""

from __future__ import annotations

import logging
from functools import lru_cache

import numpy as np

import sdr
from sdr.backends.collectives.dtypes import dtype_name, storage_dtype
from sdr.backends.collectives.interpreter import OpInterpreter
from sdr.backends.collectives.layout import Layout, LoweredOp, lower, make_layout
from sdr.backends.hierarchical.port_channel import SdrPortChannel
from sdr.collectives.plan import Plan
from sdr.errors import ConfigError
from sdr.transport import MemoryRegion

__all__ = ["PortExecutor"]

log = logging.getLogger(__name__)


@lru_cache(maxsize=256)
def _lowered(plan: Plan, rank: int, layout: Layout) -> list[LoweredOp]:
    return lower(plan, rank, layout)


@lru_cache(maxsize=256)
def _expected(plan: Plan, sender: int, receiver: int, layout: Layout) -> tuple[tuple, tuple]:
    """Puts ``sender`` makes to ``receiver`` as (offset, nbytes), and for each of its
    signals to ``receiver`` how many of those puts precede it."""
    puts: list[tuple[int, int]] = []
    bounds: list[int] = []
    for op in _lowered(plan, sender, layout):
        if op.peer != receiver:
            continue
        if op.kind == "put":
            assert op.dst is not None
            puts.append((op.dst.offset, op.nbytes))
        elif op.kind == "signal":
            bounds.append(len(puts))
        elif op.kind == "get":
            raise ConfigError(f"plan {plan.name}: port channels cannot 'get'")
    return tuple(puts), tuple(bounds)


class PortExecutor:
    """Executes port plans for one datacenter rank ``rank`` over ``channels`` (by port rank).

    ``ctx`` registers the scratch buffer that peers' writes land in.
    """

    def __init__(
        self, rank: int, world_size: int, channels: dict[int, SdrPortChannel], ctx: sdr.Context
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.channels = channels
        self.ctx = ctx
        self._scratch = np.zeros(0, np.uint8)
        self._mr: MemoryRegion | None = None
        self.calls = 0
        self._interpreter = OpInterpreter(rank, port=channels, unit="datacenter")

    def _scratch_for(self, nbytes: int) -> tuple[np.ndarray, MemoryRegion | None]:
        if nbytes > self._scratch.size or self._mr is None:
            self._scratch = np.zeros(max(nbytes, 64), np.uint8)  # written once: pre-faulted
            self._mr = self.ctx.register(self._scratch)
        return self._scratch, self._mr

    def run(
        self, plan: Plan, x: np.ndarray, out: np.ndarray, dtype: str | None = None
    ) -> np.ndarray:
        """Run ``plan`` with input ``x`` and output ``out`` (C-contiguous); returns ``out``."""
        if plan.world_size != self.world_size:
            raise ConfigError(
                f"plan {plan.name} is for {plan.world_size} datacenters, not {self.world_size}"
            )
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            raise ConfigError("collective buffers must be C-contiguous")
        dt = dtype_name(x.dtype, dtype)
        layout = make_layout(plan, x.nbytes, out.nbytes, storage_dtype(dt).itemsize)
        scratch, mr = self._scratch_for(layout.scratch)
        for peer, ch in self.channels.items():
            puts, bounds = _expected(plan, peer, self.rank, layout)
            if puts or bounds:
                assert mr is not None
                ch.begin_call(mr, list(puts), list(bounds))
        buffers = {
            "input": x.reshape(-1).view(np.uint8),
            "output": out.reshape(-1).view(np.uint8),
            "scratch": scratch,
        }
        self._interpreter.run(_lowered(plan, self.rank, layout), buffers, dt)
        self.calls += 1
        return out
