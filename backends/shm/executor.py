"""Runs a plan on one CPU rank: each lowered op becomes NumPy work on shared memory."""

from __future__ import annotations

import numpy as np

from sdr.backends.collectives.dtypes import from_f32, to_f32
from sdr.backends.collectives.layout import LoweredOp, Span
from sdr.backends.shm.memory import Check, Region, ShmMemoryChannel, read_packets
from sdr.errors import ConfigError


def _dst(op: LoweredOp) -> Span:
    """The destination of a data op (lower() gives every put/get/copy/reduce one)."""
    if op.dst is None:
        raise ConfigError(f"lowered {op.kind} op has no destination")
    return op.dst


class ShmExecutor:
    """Interprets lowered ops for one rank; ``seq`` numbers calls (flags and parity);
    ``check`` ends its waits early (see :func:`~sdr.backends.shm.memory.spin_until`)."""

    def __init__(
        self,
        rank: int,
        region: Region,
        channels: dict[int, ShmMemoryChannel],
        check: Check | None = None,
    ):
        self.rank = rank
        self.region = region
        self.channels = channels
        self.check = check
        self.seq = 0

    def run(
        self, ops: list[LoweredOp], inp: np.ndarray, out: np.ndarray, dtype: str, timeout: float
    ) -> None:
        """Execute ``ops`` on byte views ``inp``/``out`` (elements of ``dtype``)."""
        parity, flag = self.seq & 1, self.seq + 1
        for ch in self.channels.values():
            ch.parity = parity
        local = {
            "input": inp,
            "output": out,
            "scratch": self.region.scratch(parity),
            "packets": self.region.packets(parity),
        }

        def read(span: Span, nbytes: int) -> np.ndarray:
            if span.peer is not None:  # a peer's scratch (reduce source)
                remote = self._channel(span.peer).remote.scratch(parity)
                return remote[span.offset : span.offset + nbytes]
            if span.buffer == "packets":
                return read_packets(
                    local["packets"][span.offset :], nbytes, flag, timeout, self.check
                )
            return local[span.buffer][span.offset : span.offset + nbytes]

        for op in ops:
            kind = op.kind
            if kind == "put":
                ch = self._channel(op.peer)
                src = read(op.srcs[0], op.nbytes)
                dst = _dst(op)
                if dst.buffer == "packets":
                    ch.put_packets(dst.offset, src, 0, op.nbytes, flag)
                else:
                    ch.put(dst.offset, src, 0, op.nbytes)
            elif kind == "get":
                dst = _dst(op)
                into = local[dst.buffer]
                self._channel(op.peer).get(into, dst.offset, op.srcs[0].offset, op.nbytes)
            elif kind == "copy":
                data = read(op.srcs[0], op.nbytes)
                dst = _dst(op)
                local[dst.buffer][dst.offset : dst.offset + op.nbytes] = data
            elif kind == "reduce":
                acc = to_f32(read(op.srcs[0], op.nbytes), dtype).copy()
                for s in op.srcs[1:]:
                    acc += to_f32(read(s, op.nbytes), dtype)
                res = from_f32(acc, dtype).view(np.uint8)
                dst = _dst(op)
                local[dst.buffer][dst.offset : dst.offset + op.nbytes] = res
            elif kind == "signal":
                self._channel(op.peer).signal()
            elif kind == "wait":
                self._channel(op.peer).wait(timeout)
            elif kind == "flush":
                self._channel(op.peer).flush()
            # barrier: one worker per rank here, nothing to do
        self.seq += 1

    def _channel(self, peer: int | None) -> ShmMemoryChannel:
        if peer not in self.channels:
            raise ConfigError(f"rank {self.rank} has no channel to rank {peer}")
        return self.channels[peer]
