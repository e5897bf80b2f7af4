"""Runs plans on one GPU rank: encodes lowered ops for the executor kernel and launches it.

The kernel (:mod:`sdr.backends.gpu.kernels`) is compiled once per element type. Encoded op
arrays are cached on the device per (plan, layout, dtype), so a call does no allocation
and can be captured in a CUDA graph (after one warm-up call of that shape). All state
(call counter, semaphore counts) lives in device memory, so graph replays stay correct.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from typing import Any

import numpy as np

from sdr.backends.collectives.layout import Layout, LoweredOp, Span, lower
from sdr.backends.gpu.kernels import (
    DTYPE_CODES,
    MAX_BLOCKS,
    MAX_SRCS,
    OP_CODES,
    OP_WORDS,
    SEM_SLOTS,
    STATE_WORDS,
    THREADS,
    kernel_source,
)
from sdr.backends.gpu.memory import GpuRegion
from sdr.collectives.plan import Plan
from sdr.errors import ConfigError, TransportError

log = logging.getLogger(__name__)

#: Bytes an op gives each thread block before another block is added: LL packet ops want
#: about one 8-byte word per thread (each word is a flag poll), plain copies more.
LL_BYTES_PER_BLOCK = int(os.environ.get("SDR_GPU_LL_BYTES_PER_BLOCK", 2 * 1024))
BYTES_PER_BLOCK = int(os.environ.get("SDR_GPU_BYTES_PER_BLOCK", 8 * 1024))
BLOCKS_MAX = int(os.environ.get("SDR_GPU_MAX_BLOCKS", MAX_BLOCKS))


def blocks_for(ops: list[LoweredOp]) -> int:
    """Thread blocks that one rank's ops want (see :func:`plan_blocks` for a whole call)."""
    want = 1
    for op in ops:
        if op.nbytes:
            pk = any(s.buffer == "packets" for s in (op.dst, *op.srcs) if s is not None)
            want = max(want, -(-op.nbytes // (LL_BYTES_PER_BLOCK if pk else BYTES_PER_BLOCK)))
    return max(1, min(BLOCKS_MAX, MAX_BLOCKS, want))


@lru_cache(maxsize=512)
def plan_blocks(plan: Plan, layout: Layout) -> int:
    """Thread blocks for one call of ``plan``: the most that any rank's ops want.

    Every rank must launch the same number: semaphores pair block b's signal with block
    b's wait on the peer, and a put and the op that consumes it on the peer must split
    their bytes over blocks alike. Plans whose ranks move different amounts (a pipelined
    broadcast: the root copies the whole buffer, peers one slice at a time) would
    otherwise pair mismatched slices.
    """
    return max(blocks_for(lower(plan, r, layout)) for r in range(plan.world_size))


def buffer_id(span: Span) -> int:
    """The kernel's buffer id of a span (see sdr.backends.gpu.kernels)."""
    if span.peer is None:
        return {"input": 0, "output": 1, "scratch": 2, "packets": 3}[span.buffer]
    return 4 + 2 * span.peer + (1 if span.buffer == "packets" else 0)


def encode(ops: list[LoweredOp]) -> np.ndarray:
    """Lowered ops as the kernel's int64 records."""
    out = np.zeros((len(ops), OP_WORDS), np.int64)
    for i, op in enumerate(ops):
        if len(op.srcs) > MAX_SRCS:
            raise ConfigError(f"op with {len(op.srcs)} sources; the GPU executor takes {MAX_SRCS}")
        out[i, 0] = OP_CODES[op.kind]
        out[i, 1] = op.nbytes
        out[i, 4] = -1 if op.peer is None else op.peer
        if op.dst is not None:
            out[i, 2] = buffer_id(op.dst)
            out[i, 3] = op.dst.offset
        out[i, 5] = len(op.srcs)
        for k, s in enumerate(op.srcs):
            out[i, 6 + 2 * k] = buffer_id(s)
            out[i, 7 + 2 * k] = s.offset
    return out


class GpuExecutor:
    """Device state of one rank and the launch of the executor kernel."""

    def __init__(self, rank: int, world_size: int, device: int) -> None:
        import cupy as cp  # noqa: PLC0415 - optional dependency

        self.cp = cp
        self.rank = rank
        self.world_size = world_size
        self.device = device
        with cp.cuda.Device(device):
            self.state = cp.zeros(STATE_WORDS, cp.uint32)
            self.sent = cp.zeros(world_size * SEM_SLOTS, cp.uint64)
            self.expected = cp.zeros(world_size * SEM_SLOTS, cp.uint64)
        self._kernels: dict[str, Any] = {}
        self._ops: dict[Any, tuple[Any, int, int]] = {}
        self.region: GpuRegion | None = None
        self.tab = None
        self.semtab = None

    def attach(self, region: GpuRegion) -> None:
        """Use ``region`` (fresh semaphores: counts restart at zero)."""
        cp = self.cp
        n = self.world_size
        tab = [region.scratch(self.rank), region.packets(self.rank)]
        for p in range(n):
            tab += [region.scratch(p), region.packets(p)]
        with cp.cuda.Device(self.device):
            self.tab = cp.asarray(np.array(tab, np.uint64))
            self.semtab = cp.asarray(np.array([region.sems(p) for p in range(n)], np.uint64))
            self.sent.fill(0)
            self.expected.fill(0)
        self.region = region

    def kernel(self, dtype: str) -> Any:
        """The compiled executor kernel for ``dtype``."""
        if dtype not in self._kernels:
            mod = self.cp.RawModule(
                code=kernel_source(), options=(f"-DSDR_DTYPE={DTYPE_CODES[dtype]}",)
            )
            self._kernels[dtype] = mod.get_function("sdr_exec")
        return self._kernels[dtype]

    def prepare(self, key: Any, ops: list[LoweredOp], blocks: int) -> tuple[Any, int, int]:
        """(device op array, op count, blocks) for ``ops``, cached under ``key``; ``blocks``
        from :func:`plan_blocks`, the same on every rank."""
        if key not in self._ops:
            with self.cp.cuda.Device(self.device):
                arr = self.cp.asarray(encode(ops))
            self._ops[key] = (arr, len(ops), blocks)
        return self._ops[key]

    def launch(self, prepared: tuple[Any, int, int], in_ptr: int, out_ptr: int, dtype: str):
        """Launch the kernel on the current stream."""
        assert self.region is not None
        arr, nops, blocks = prepared
        self.kernel(dtype)(
            (blocks,),
            (THREADS,),
            (
                arr,
                np.int32(nops),
                np.uint64(in_ptr),
                np.uint64(out_ptr),
                self.tab,
                self.semtab,
                np.int64(self.region.scratch_cap),
                np.int64(self.region.packets_cap),
                self.sent,
                self.expected,
                self.state,
                np.int32(self.rank),
            ),
        )

    def check(self) -> None:
        """Raise TransportError if a kernel gave up waiting (synchronises the device)."""
        err = int(self.state[4].get())
        if err:
            what = "LL packets" if err == 1 else "a semaphore"
            raise TransportError(f"rank {self.rank}: executor timed out waiting for {what}")
