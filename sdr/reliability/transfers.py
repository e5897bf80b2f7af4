"""Per-message bookkeeping of the reliable QP: a scheme machine bound to its SDR lanes.

An :class:`Outgoing` message owns one SDR stream per lane. It turns SendChunks actions into
stream ranges and turns the stream's packet counter back into departures (``on_sent``):
ranges leave in queue order, so the k-th queued chunk has left once the stream has sent
as many packets as the first k chunks hold. An :class:`Incoming` message owns one SDR
receive per lane and turns new bits of their chunk bitmaps into ``on_chunks`` events.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from sdr.api import QP, Context, RecvHandle, SendStream
from sdr.errors import ConfigError, ProtocolError
from sdr.reliability.base import (
    Machine,
    ReopenChunks,
    Scheme,
    SchemeReceiver,
    SchemeSender,
    SealChunks,
)
from sdr.reliability.geometry import MessageGeometry, chunk_runs
from sdr.reliability.handles import HandleState, ReceiveHandle, WriteHandle
from sdr.send_table import SendState
from sdr.transport import MemoryRegion

__all__ = ["OutLane", "Outgoing", "Incoming", "open_outgoing"]

_MAX_CTS_BACKOFF = 16


@dataclass
class OutLane:
    """One SDR stream of an outgoing message: where its bytes come from, what is queued."""

    index: int
    stream: SendStream
    region: MemoryRegion
    base: int  # offset of the lane's byte 0 in region
    geometry: MessageGeometry
    mtu: int
    created: float
    pending: deque[tuple[int, int]] = field(default_factory=deque)  # (cum packets, chunk)
    queued_packets: int = 0
    cts_checked: bool = False
    last_cts_request: float = 0.0
    cts_requests: int = 0

    def __post_init__(self) -> None:
        self.last_cts_request = self.created

    def queue(self, chunks: np.ndarray) -> None:
        """Hand chunks to the stream, as few ranges as possible."""
        g, mtu = self.geometry, self.mtu
        for first, count in chunk_runs(np.sort(chunks)):
            start = first * g.chunk_size
            stop = g.bounds(first + count - 1)[1]
            self.stream.send(self.region, self.base + start, start, stop - start)
            for c in range(first, first + count):
                lo, hi = g.bounds(c)
                self.queued_packets += -(-(hi - lo) // mtu)
                self.pending.append((self.queued_packets, c))

    def departed(self) -> np.ndarray:
        """Chunks that left since the last call."""
        sent = self.stream.record.packets_sent
        out = []
        while self.pending and self.pending[0][0] <= sent:
            out.append(self.pending.popleft()[1])
        return np.array(out, dtype=np.int64)

    def check_cts(self, seq: int) -> ProtocolError | None:
        """Once the CTS is there: the error if the matching receive has the wrong length."""
        remote = self.stream.record.remote
        if self.cts_checked or remote is None:
            return None
        self.cts_checked = True
        if remote.length == self.geometry.length:
            return None
        hint = (
            "post a receive of exactly the written length"
            if self.index == 0
            else "the peer's scheme, k, m or chunk size differ from ours"
        )
        return ProtocolError(
            f"write seq {seq}: lane {self.index}'s matching receive has {remote.length} bytes, "
            f"expected {self.geometry.length}; {hint}"
        )

    def cts_deadline(self, rto: float) -> float | None:
        """When to ask for a CTS again (lane 0 always needs one: it starts the message;
        other lanes only once they have data queued). One RTO, doubling, up to 16."""
        if self.has_cts or (self.index > 0 and self.queued_packets == 0):
            return None
        return self.last_cts_request + rto * min(2**self.cts_requests, _MAX_CTS_BACKOFF)

    @property
    def backlogged(self) -> bool:
        """Queued packets are waiting for the pacer (the CTS is there, they are not out)."""
        rec = self.stream.record
        return rec.remote is not None and rec.packets_sent < self.queued_packets

    @property
    def has_cts(self) -> bool:
        return self.stream.record.remote is not None

    def close(self, cancel_reason: Exception) -> None:
        """End the stream; drop what was never sent (it could block later messages)."""
        rec = self.stream.record
        if rec.state is not SendState.QUEUED:
            return
        if rec.remote is None or rec.packets_sent < self.queued_packets:
            rec.fail(cancel_reason)  # type: ignore[arg-type]
        elif not rec.ended:
            self.stream.end()


@dataclass
class Outgoing:
    """A reliable write in flight."""

    handle: WriteHandle
    machine: SchemeSender
    lanes: list[OutLane]
    started: bool = False


def open_outgoing(
    handle: WriteHandle, mr: MemoryRegion, offset: int, scheme: Scheme, qp: QP, now: float
) -> Outgoing:
    """Build the sender machine of a write and open one SDR stream per lane, in order."""
    data = mr.view[offset : offset + handle.length]
    machine = scheme.sender(handle.seq, data)
    lanes = []
    for index, length in enumerate(scheme.lanes(handle.length)):
        if index == 0:
            region, base = mr, offset
        else:
            region, base = qp.ctx.register(_lane_buffer(machine, index, length)), 0
        geometry = MessageGeometry(length, scheme.chunk_size)
        lanes.append(OutLane(index, qp.send_stream(), region, base, geometry, qp.attr.mtu, now))  # type: ignore[arg-type]
    handle.state = HandleState.ACTIVE
    return Outgoing(handle, machine, lanes)


def _lane_buffer(machine: Machine, lane: int, length: int) -> np.ndarray:
    buf = machine.lane_buffer(lane)
    if buf is None or buf.nbytes != length:
        raise ConfigError(
            f"{type(machine).__name__}.lane_buffer({lane}) must be a {length}-byte array, "
            f"got {None if buf is None else buf.nbytes}"
        )
    return buf


@dataclass
class Incoming:
    """A reliable receive: its machine and the SDR receives of its lanes (posted in order)."""

    handle: ReceiveHandle
    region: MemoryRegion
    offset: int
    lengths: tuple[int, ...]
    machine: SchemeReceiver | None = None
    lane_regions: list[tuple[MemoryRegion, int]] = field(default_factory=list)
    posted: list[RecvHandle] = field(default_factory=list)
    seen: list[np.ndarray] = field(default_factory=list)
    over: bool = False  # the machine finished; lanes still to post are completed at once

    def prepare(self, scheme: Scheme, ctx: Context) -> None:
        """Build the receiver machine and register its lane buffers (just before posting)."""
        data = self.region.view[self.offset : self.offset + self.handle.length]
        self.machine = scheme.receiver(self.handle.seq, data)
        self.lane_regions.append((self.region, self.offset))
        for lane, length in enumerate(self.lengths[1:], start=1):
            self.lane_regions.append((ctx.register(_lane_buffer(self.machine, lane, length)), 0))
        self.handle.state = HandleState.ACTIVE

    @property
    def fully_posted(self) -> bool:
        return len(self.posted) == len(self.lengths)

    def guard(self, action: SealChunks | ReopenChunks) -> None:
        """Carry out a receiver's seal (verified chunks: no more writes) or reopen (failed
        chunks: forget them, so the repair's arrival is reported as new)."""
        if action.lane >= len(self.posted):
            return
        h = self.posted[action.lane]
        if h.completed:
            return
        if isinstance(action, SealChunks):
            h.seal(action.chunks)
        else:
            h.reopen(action.chunks)
            seen = self.seen[action.lane]
            chunks = action.chunks[(action.chunks >= 0) & (action.chunks < len(seen))]
            seen[chunks] = False

    def arrivals(self) -> list[tuple[int, np.ndarray]]:
        """(lane, chunks) whose bitmap bits became set since the last call."""
        out = []
        for lane, (h, seen) in enumerate(zip(self.posted, self.seen, strict=True)):
            bits = h.record.bitmap.chunks
            new = np.flatnonzero(bits & ~seen)
            if len(new):
                seen[new] = True
                out.append((lane, new))
        return out
