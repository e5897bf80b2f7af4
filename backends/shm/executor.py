"""Runs a plan on one CPU rank over shared-memory channels.

The ops are interpreted by :class:`~sdr.backends.collectives.interpreter.OpInterpreter`
(shared with the SDR port-channel executor); what is shared-memory's own is here: the
call counter, whose parity picks the scratch and packet halves of the call and whose
successor is the LL packet flag, and how this rank reads the packets peers wrote.
"""

from __future__ import annotations

import numpy as np

from sdr.backends.collectives.interpreter import OpInterpreter
from sdr.backends.collectives.layout import LoweredOp
from sdr.backends.shm.memory import Check, Region, ShmMemoryChannel, read_packets


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
        self._interpreter = OpInterpreter(rank, memory=channels)

    def run(
        self, ops: list[LoweredOp], inp: np.ndarray, out: np.ndarray, dtype: str, timeout: float
    ) -> None:
        """Execute ``ops`` on byte views ``inp``/``out`` (elements of ``dtype``)."""
        parity, flag = self.seq & 1, self.seq + 1
        for ch in self.channels.values():
            ch.parity = parity
        packets = self.region.packets(parity)
        check = self.check

        def read(offset: int, nbytes: int) -> np.ndarray:
            return read_packets(packets[offset:], nbytes, flag, timeout, check)

        buffers = {
            "input": inp,
            "output": out,
            "scratch": self.region.scratch(parity),
            "packets": packets,
        }
        self._interpreter.run(ops, buffers, dtype, flag=flag, timeout=timeout, read_packets=read)
        self.seq += 1
