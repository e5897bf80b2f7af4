"""What the receiver tells the sender about a message's losses: gap counting and LOSS_REPORT.

:class:`GapCounter` watches one lane's chunk bitmap. Chunks of a lane leave in index order
on their first transmission, so when chunk ``c`` lands beyond the highest index seen so
far, every chunk between that is still missing was lost on its first transmission (or is
reordered by more than a chunk, counted as a loss). Retransmissions land below the highest
index and are not counted again. A loss at the very end of a lane is not seen (no later
chunk shows it): a small undercount, one tail per lane.

LOSS_REPORT (type 24, receiver -> sender), same framing as sdr.reliability.messages::

    type u8 | version u8 | flags u16 | seq u64 | trials u32 | losses u32 | runs u32 |
    bytes u64 | span_ns u64 | crc32 u32

``bytes``/``span_ns``: bytes of first-transmission chunks that landed and the time from
the first to the last of them (the delivery rate; retransmissions would stretch it).
Sent once, when the receiver's machine finishes, before its ACK.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sdr.errors import ProtocolError
from sdr.reliability.messages import ControlMessage

__all__ = ["LOSS_REPORT_TYPE", "GapCounter", "LossReport", "is_loss_report"]

LOSS_REPORT_TYPE = 24
_VERSION = 1
_HEADER = struct.Struct("!BBHQ")
_BODY = struct.Struct("!IIIQQ")
_TRAILER = struct.Struct("!I")
_SIZE = _HEADER.size + _BODY.size + _TRAILER.size


@dataclass(frozen=True)
class LossReport(ControlMessage):
    """First-transmission losses of message ``seq`` as the receiver's bitmaps showed them."""

    TYPE: ClassVar[int] = LOSS_REPORT_TYPE
    seq: int
    trials: int
    losses: int
    runs: int
    nbytes: int
    span_ns: int

    def _body(self) -> bytes:
        return _BODY.pack(self.trials, self.losses, self.runs, self.nbytes, self.span_ns)

    @classmethod
    def decode(cls, data: bytes) -> LossReport:
        """Parse one LOSS_REPORT; ProtocolError if it is damaged or not one."""
        if len(data) != _SIZE:
            raise ProtocolError(f"LOSS_REPORT must be {_SIZE} bytes, got {len(data)}")
        view = memoryview(data)
        (crc,) = _TRAILER.unpack_from(view, _SIZE - _TRAILER.size)
        if zlib.crc32(view[: -_TRAILER.size]) != crc:
            raise ProtocolError("LOSS_REPORT checksum mismatch (damaged in transit)")
        kind, version, _flags, seq = _HEADER.unpack_from(view)
        if kind != LOSS_REPORT_TYPE or version != _VERSION:
            raise ProtocolError(f"not a LOSS_REPORT v{_VERSION}: type {kind}, version {version}")
        trials, losses, runs, nbytes, span = _BODY.unpack_from(view, _HEADER.size)
        return cls(seq, trials, losses, runs, nbytes, span)


def is_loss_report(data: bytes) -> bool:
    """Whether a control message carries the LOSS_REPORT type byte."""
    return bool(data) and data[0] == LOSS_REPORT_TYPE


class GapCounter:
    """First-transmission losses of one lane, from the chunks that land (in any batches)."""

    def __init__(self, n_chunks: int) -> None:
        self.landed = np.zeros(max(n_chunks, 0), dtype=bool)
        self.hi = -1
        self.trials = 0
        self.losses = 0
        self.runs = 0

    def add(self, chunks: np.ndarray) -> None:
        """Chunks whose bits became set (any order; indices past the lane are ignored)."""
        chunks = chunks[(chunks >= 0) & (chunks < len(self.landed))]
        if not len(chunks):
            return
        top = int(chunks.max())
        self.landed[chunks] = True
        if top <= self.hi:
            return
        missing = ~self.landed[self.hi + 1 : top]
        self.trials += top - self.hi
        self.losses += int(missing.sum())
        # runs: places where a missing chunk follows a landed one (or starts the window)
        starts = missing & ~np.concatenate([[False], missing[:-1]])
        self.runs += int(starts.sum())
        self.hi = top
