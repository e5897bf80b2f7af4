"""What the receiver tells the sender about a message's losses: gap counting and LOSS_REPORT.

:class:`GapCounter` watches one lane's chunk bitmap. Chunks of a lane leave in index order
on their first transmission, so when chunk ``c`` lands beyond the highest index seen so
far, every chunk between that is still missing was lost on its first transmission. A hole
is settled only once a chunk ``reorder`` (2) indices past it landed, so small reordering
across channels is not counted as loss. Retransmissions land in settled ground and are
not counted again. Losses in the last ``reorder + 1`` chunks of a lane are not seen (no
later chunk shows them): a small undercount.

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

from sdr.errors import RemoteProtocolError
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
            raise RemoteProtocolError(f"LOSS_REPORT must be {_SIZE} bytes, got {len(data)}")
        view = memoryview(data)
        (crc,) = _TRAILER.unpack_from(view, _SIZE - _TRAILER.size)
        if zlib.crc32(view[: -_TRAILER.size]) != crc:
            raise RemoteProtocolError("LOSS_REPORT checksum mismatch (damaged in transit)")
        kind, version, _flags, seq = _HEADER.unpack_from(view)
        if kind != LOSS_REPORT_TYPE or version != _VERSION:
            raise RemoteProtocolError(
                f"not a LOSS_REPORT v{_VERSION}: type {kind}, version {version}"
            )
        trials, losses, runs, nbytes, span = _BODY.unpack_from(view, _HEADER.size)
        return cls(seq, trials, losses, runs, nbytes, span)


def is_loss_report(data: bytes) -> bool:
    """Whether a control message carries the LOSS_REPORT type byte."""
    return bool(data) and data[0] == LOSS_REPORT_TYPE


class GapCounter:
    """First-transmission losses of one lane, from the chunks that land (in any batches).

    A hole counts as a loss once a chunk ``reorder`` or more indices beyond it has landed
    (multi-channel receive paths complete neighbouring chunks slightly out of order).
    """

    def __init__(self, n_chunks: int, reorder: int = 2) -> None:
        self.landed = np.zeros(max(n_chunks, 0), dtype=bool)
        self.reorder = max(0, reorder)
        self.hi = -1
        self.confirmed = -1  # chunks <= confirmed are settled (landed or counted lost)
        self.trials = 0
        self.losses = 0
        self.runs = 0

    def add(self, chunks: np.ndarray) -> None:
        """Chunks whose bits became set (any order; indices past the lane are ignored)."""
        chunks = chunks[(chunks >= 0) & (chunks < len(self.landed))]
        if not len(chunks):
            return
        self.landed[chunks] = True
        self.hi = max(self.hi, int(chunks.max()))
        settle = self.hi - self.reorder
        if settle <= self.confirmed:
            return
        missing = ~self.landed[self.confirmed + 1 : settle + 1]
        self.trials += settle - self.confirmed
        self.losses += int(missing.sum())
        # a run starts where a missing chunk follows a landed (or settled-landed) one
        before = bool(self.confirmed >= 0 and not self.landed[self.confirmed])
        prev = np.concatenate([[before], missing[:-1]])
        self.runs += int((missing & ~prev).sum())
        self.confirmed = settle
