"""Per-message bookkeeping of a reliable connection: a scheme machine bound to its SDR lanes.

An :class:`Outgoing` message owns one SDR stream (a core :class:`~sdr.send_table.SendRecord`)
per lane and turns the machine's SendChunks actions into stream ranges; the send table's
departure events (packets [a, b) of a record left) become ``on_sent`` chunks through
:meth:`OutLane.departed`. An :class:`Incoming` message owns one SDR receive (a core
:class:`~sdr.recv_table.RecvRecord`) per lane. Everything here is sans-I/O: it talks to the
:class:`~sdr.queue_pair.QueuePairCore`, never to a driver or a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sdr.errors import ConfigError, ProtocolError
from sdr.queue_pair import QueuePairCore
from sdr.recv_table import RecvRecord, RecvState
from sdr.reliability.base import (
    Machine,
    ReopenChunks,
    Scheme,
    SchemeReceiver,
    SchemeSender,
    SealChunks,
)
from sdr.reliability.geometry import MessageGeometry, chunk_runs
from sdr.send_table import SendRecord, SendState
from sdr.transport import MemoryRegion

__all__ = ["OutLane", "Outgoing", "Incoming", "open_outgoing", "Register"]

_NOT_COUNTED, _COUNTED, _DELIVERED = 0, 1, 2  # a chunk in the controller's books

Register = Callable[[object], MemoryRegion]
"""Registers a lane buffer of the scheme (parity, say) with the driver."""


@dataclass
class OutLane:
    """One SDR stream of an outgoing message: where its bytes come from, what is queued."""

    index: int
    record: SendRecord
    region: MemoryRegion
    base: int  # offset of the lane's byte 0 in region
    geometry: MessageGeometry
    mtu: int
    queued_packets: int = 0
    cts_checked: bool = False
    copies: int = 1
    """Times a message of one chunk is queued (``ReliabilityConfig.small_copies``)."""
    _news: deque[bool] = field(init=False, repr=False, default_factory=deque)
    """Per queued copy of a one-chunk lane, in order: whether its departure is news to
    the scheme (the first of each queueing is; its copies are not retransmissions)."""
    _flight: np.ndarray = field(init=False, repr=False)
    """Per chunk, in the congestion controller's books: not counted, counted in flight,
    or delivered (never counted again)."""

    def __post_init__(self) -> None:
        self._flight = np.zeros(self.geometry.n_chunks, dtype=np.int8)

    def queue(self, core: QueuePairCore, now: float, chunks: np.ndarray) -> None:
        """Hand chunks to the stream, as few ranges as possible (a one-chunk message
        ``copies`` times: the receiver drops the copies after the first)."""
        g, mtu = self.geometry, self.mtu
        times = self.copies if g.n_chunks == 1 else 1
        if times > 1:
            self._news.extend([True] + [False] * (times - 1))
        for first, count in chunk_runs(np.sort(chunks)):
            start = first * g.chunk_size
            stop = g.bounds(first + count - 1)[1]
            for _ in range(times):
                core.stream_send(
                    now, self.record, self.region, self.base + start, start, stop - start
                )
                self.queued_packets += -(-stop // mtu) - start // mtu

    def count_in_flight(self, chunks: np.ndarray) -> int:
        """Chunks that left whole: the bytes the congestion controller newly counts in
        flight. A chunk counts once, from the departure of its last packet until the
        scheme's verdict (:meth:`settle`); never while it is counted already, and never
        once delivered (a retransmission queued by a spurious RTO may leave after the
        first copy's ACK: nothing would ever take its bytes off the books again)."""
        chunks = chunks[self._flight[chunks] == _NOT_COUNTED]
        self._flight[chunks] = _COUNTED
        return self.geometry.chunk_bytes(chunks) if len(chunks) else 0

    def settle(self, chunks: np.ndarray, delivered: bool) -> int:
        """The scheme's verdict on chunks (acknowledged, or lost and queued again): the
        bytes that leave the controller's books (those :meth:`count_in_flight` counted)."""
        chunks = np.unique(chunks[(chunks >= 0) & (chunks < len(self._flight))])
        counted = chunks[self._flight[chunks] == _COUNTED]
        self._flight[chunks] = _DELIVERED if delivered else _NOT_COUNTED
        return self.geometry.chunk_bytes(counted) if len(counted) else 0

    def departed(self, first: int, stop: int) -> np.ndarray:
        """Chunks whose last packet is among packets [first, stop) (a departure event)."""
        g, mtu = self.geometry, self.mtu
        lo = first * mtu // g.chunk_size
        hi = min((stop * mtu - 1) // g.chunk_size, g.n_chunks - 1)
        chunks = np.arange(lo, hi + 1, dtype=np.int64)
        ends = np.minimum((chunks + 1) * g.chunk_size, g.length)
        last = -(-ends // mtu) - 1
        chunks = chunks[(last >= first) & (last < stop)]
        if len(chunks) and self._news and not self._news.popleft():
            return chunks[:0]  # a copy left: the scheme heard of this chunk already
        return chunks

    def check_cts(self, seq: int) -> ProtocolError | None:
        """Once the CTS is there: the error if the matching receive has the wrong length."""
        remote = self.record.remote
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

    @property
    def backlogged(self) -> bool:
        """Queued packets are waiting for the pacer (the CTS is there, they are not out)."""
        rec = self.record
        return rec.remote is not None and rec.packets_sent < self.queued_packets

    @property
    def has_cts(self) -> bool:
        return self.record.remote is not None

    def close(self, core: QueuePairCore, now: float, cancel_reason: Exception) -> None:
        """End the stream; drop what was never sent (it could block later messages)."""
        rec = self.record
        if rec.state is not SendState.QUEUED:
            return
        if rec.remote is None or rec.packets_sent < self.queued_packets:
            rec.fail(cancel_reason)  # type: ignore[arg-type]
        elif not rec.ended:
            core.stream_end(now, rec)


@dataclass
class Outgoing:
    """A reliable write in flight."""

    seq: int
    length: int
    machine: SchemeSender
    lanes: list[OutLane]
    created: float
    started: bool = False
    cc_bytes: float = 0.0
    """Bytes of this write the congestion controller counts in flight."""
    last_sent: float | None = None
    """When a packet of this write last left (for the RTT sample of its final ACK)."""


def open_outgoing(
    seq: int,
    region: MemoryRegion,
    offset: int,
    length: int,
    scheme: Scheme,
    core: QueuePairCore,
    register: Register,
    now: float,
    cts_retry: float,
    copies: int = 1,
) -> Outgoing:
    """Build the sender machine of a write and open one SDR stream per lane, in order.

    Every lane asks for its CTS again after ``cts_retry`` (the core's CTS requests); a
    lane of one chunk sends it ``copies`` times."""
    data = region.view[offset : offset + length]
    machine = scheme.sender(seq, data)
    lanes = []
    for index, lane_length in enumerate(scheme.lanes(length)):
        if index == 0:
            lane_region, base = region, offset
        else:
            lane_region, base = register(_lane_buffer(machine, index, lane_length)), 0
        record = core.stream_start(now, cts_retry=cts_retry)
        geometry = MessageGeometry(lane_length, scheme.chunk_size)
        lanes.append(
            OutLane(index, record, lane_region, base, geometry, core.attr.mtu, copies=copies)
        )
    return Outgoing(seq, length, machine, lanes, now)


def _lane_buffer(machine: Machine, lane: int, length: int) -> np.ndarray:
    buf = machine.lane_buffer(lane)
    if buf is None and length == 0:  # an empty lane (EC's parity of a one-chunk message)
        return np.zeros(0, np.uint8)
    if buf is None or buf.nbytes != length:
        raise ConfigError(
            f"{type(machine).__name__}.lane_buffer({lane}) must be a {length}-byte array, "
            f"got {None if buf is None else buf.nbytes}"
        )
    return buf


@dataclass
class Incoming:
    """A reliable receive: its machine and the SDR receives of its lanes (posted in order)."""

    seq: int
    region: MemoryRegion
    offset: int
    length: int
    lengths: tuple[int, ...]
    machine: SchemeReceiver | None = None
    lane_regions: list[tuple[MemoryRegion, int]] = field(default_factory=list)
    posted: list[RecvRecord] = field(default_factory=list)
    over: bool = False  # the machine finished; lanes still to post are completed at once
    chunks_in: int = 0
    """Chunks reported newly complete on any lane (a chunk reopened and sent again counts
    twice: this only ever overstates what arrived)."""

    def prepare(self, scheme: Scheme, register: Register) -> None:
        """Build the receiver machine and register its lane buffers (just before posting)."""
        data = self.region.view[self.offset : self.offset + self.length]
        self.machine = scheme.receiver(self.seq, data)
        self.lane_regions.append((self.region, self.offset))
        for lane, length in enumerate(self.lengths[1:], start=1):
            self.lane_regions.append((register(_lane_buffer(self.machine, lane, length)), 0))

    @property
    def fully_posted(self) -> bool:
        return len(self.posted) == len(self.lengths)

    def least_to_come(self, chunk_size: int) -> int:
        """A lower bound of the bytes that must still arrive before this receive can
        complete: the data's chunks less every chunk that arrived on any lane (a parity
        chunk stands for at most one data chunk)."""
        data_chunks = -(-self.length // chunk_size)
        return max(0, data_chunks - self.chunks_in) * chunk_size

    def guard(self, core: QueuePairCore, now: float, action: SealChunks | ReopenChunks) -> None:
        """Carry out a receiver's seal (verified chunks: no more writes) or reopen (failed
        chunks: forget them, so the repair's arrival is reported as new)."""
        if action.lane >= len(self.posted):
            return
        rec = self.posted[action.lane]
        if rec.state is RecvState.COMPLETED:
            return
        if isinstance(action, SealChunks):
            core.seal_chunks(now, rec, action.chunks)
        else:
            core.reopen_chunks(now, rec, action.chunks)
