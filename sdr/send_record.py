"""One outgoing SDR message (one-shot or stream) and its state, as the send table keeps it."""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from sdr.control import CTS
from sdr.errors import SDRError
from sdr.transport import MemoryRegion

__all__ = ["SendRecord", "SendState"]


class SendState(enum.Enum):
    QUEUED = "queued"
    DONE = "done"
    FAILED = "failed"


@dataclass(slots=True)
class _Range:
    region: MemoryRegion
    src_offset: int
    dst_offset: int
    length: int
    next_packet: int  # first packet (in message packet units) not yet emitted


class SendRecord:
    """One message (one-shot or stream) on its way out."""

    __slots__ = (
        "seq",
        "msg_id",
        "imm",
        "stream",
        "state",
        "error",
        "remote",
        "cts_at",
        "ended",
        "length",
        "packets_sent",
        "bytes_sent",
        "cts_timeout",
        "cts_deadline",
        "cts_retry",
        "cts_requests",
        "next_cts_request",
        "_ranges",
        "_covered",
    )

    def __init__(self, seq: int, msg_id: int, imm: int, stream: bool, fragments: int) -> None:
        self.seq = seq
        self.msg_id = msg_id
        self.imm = imm
        self.stream = stream
        self.state = SendState.QUEUED
        self.error: SDRError | None = None
        self.remote: CTS | None = None
        self.cts_at: float | None = None
        """``now`` of the round that brought the CTS (None: none yet)."""
        self.ended = not stream
        self.length = 0  # one-shot: message length; stream: highest byte written
        self.packets_sent = 0
        self.bytes_sent = 0
        self.cts_timeout: float | None = None
        self.cts_deadline: float | None = None
        """``now`` at which the message fails if no CTS arrived (None: never)."""
        self.cts_retry: float | None = None
        """Seconds without a CTS before asking again (None: never ask)."""
        self.cts_requests = 0
        self.next_cts_request = math.inf
        self._ranges: deque[_Range] = deque()
        self._covered = np.zeros(fragments, dtype=bool)

    @property
    def done(self) -> bool:
        return self.state is SendState.DONE

    def fail(self, error: SDRError) -> None:
        self.state = SendState.FAILED
        self.error = error
        self._ranges.clear()
