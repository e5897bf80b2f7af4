"""The send side of an SDR QP: queued messages, CTS matching and packetization.

A message waits until the receiver's CTS for the same sequence number arrives (order-based
matching), then is cut into one write-with-immediate per MTU packet, round-robin over the
channels, on the generation the CTS names. One-shot sends cover the whole message;
streams write ranges at any MTU-aligned offset (retransmissions, parity) until ended.
If the immediate's fragments were not all carried by data packets (short messages,
sparse streams), immediate-only packets of zero length carry the rest.

A message may have a CTS deadline (``cts_timeout``; one-shot sends get
:data:`DEFAULT_CTS_TIMEOUT` through :meth:`sdr.QP.post_send`): when the ``now`` fed to
:meth:`SendTable.writes` reaches it and no CTS came, the message fails with
``sdr.TimeoutError`` instead of waiting forever for a receive the peer never posts.

A message may also ask again for a lost CTS (``cts_retry`` seconds: one CTS request
after that long without a CTS, then at doubling intervals, at most 16 times the first):
:meth:`SendTable.cts_requests_due` says which, :meth:`SendTable.next_timer` when.

Departures are events, not state to diff: every packet batch handed out is recorded as
``(record, first_packet, stop_packet)`` in :attr:`SendTable.departures` (message packet
numbers, i.e. remote offset // mtu), which the layer above drains.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from sdr.config import QPAttr
from sdr.control import CTS
from sdr.counters import QPCounters
from sdr.errors import ConfigError, ProtocolError, ResourceBusy, TimeoutError
from sdr.send_record import SendRecord, SendState, _Range
from sdr.transport import MemoryRegion, WriteBatch

__all__ = [
    "DEFAULT_CTS_TIMEOUT",
    "ChannelPicker",
    "SendRecord",
    "SendState",
    "SendTable",
    "check_cts_timeout",
]

DEFAULT_CTS_TIMEOUT = 30.0
"""Seconds a one-shot :meth:`sdr.QP.post_send` waits for the peer's clear-to-send (its
matching receive) before failing with ``sdr.TimeoutError``; ``cts_timeout=None`` waits
forever. Far above any RTT (long-haul links are 25-100 ms), so it only ends sends whose
receive is never posted (or whose CTS was lost: plain SDR does not repeat it)."""
_MAX_CTS_TIMEOUT = 365 * 86400.0
_MAX_CTS_BACKOFF = 16


def check_cts_timeout(value: object) -> float | None:
    """A CTS deadline in seconds: None (no deadline) or a finite number > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"cts_timeout must be seconds (a number > 0) or None, got {value!r}")
    seconds = float(value)
    if not 0.0 < seconds <= _MAX_CTS_TIMEOUT:  # also refuses NaN
        raise ConfigError(
            f"cts_timeout must be > 0 and <= {_MAX_CTS_TIMEOUT:g} s (one year), or None "
            f"for no deadline; got {value!r}"
        )
    return seconds


_NO_REGION = MemoryRegion(key=-1, view=memoryview(bytearray(0)))


ChannelPicker = Callable[["SendRecord", np.ndarray, float], np.ndarray]
"""``pick(record, packets, now)``: the channel of each of ``packets`` of ``record``."""


class SendTable:
    """All outgoing messages of one QP, in posting order."""

    def __init__(self, attr: QPAttr, counters: QPCounters) -> None:
        self.attr = attr
        self.counters = counters
        self._queue: deque[SendRecord] = deque()
        self._cts: dict[int, tuple[CTS, float]] = {}
        self._next_seq = 0
        self._next_channel = 0
        self._next_deadline = math.inf  # earliest CTS deadline of a waiting message
        self.departures: list[tuple[SendRecord, int, int]] = []
        """(record, first packet, stop packet) of every batch handed out since drained."""
        self.channel_for: ChannelPicker | None = None
        """Picks the channel of each packet of a record at ``now`` (multipath); None:
        round robin."""

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def take_departures(self) -> list[tuple[SendRecord, int, int]]:
        """The departures since the last call (and none kept)."""
        departures, self.departures = self.departures, []
        return departures

    def _new(
        self,
        imm: int | None,
        stream: bool,
        now: float = 0.0,
        cts_timeout: float | None = None,
        cts_retry: float | None = None,
    ) -> SendRecord:
        timeout = check_cts_timeout(cts_timeout)
        retry = check_cts_timeout(cts_retry)
        if imm is not None and not 0 <= imm < 1 << 32:
            raise ConfigError(f"imm must be a 32-bit unsigned integer or None, got {imm!r}")
        if len(self._queue) >= self.attr.max_messages:
            raise ResourceBusy(
                f"{len(self._queue)} messages already in flight (max_messages="
                f"{self.attr.max_messages}); poll sends to completion first"
            )
        seq = self._next_seq
        rec = SendRecord(
            seq,
            seq % self.attr.layout.max_message_ids,
            imm or 0,
            stream,
            self.attr.layout.fragments,
        )
        self._next_seq += 1
        self._queue.append(rec)
        rec.remote, rec.cts_at = self._cts.pop(seq, (None, None))
        if timeout is not None and rec.remote is None:
            rec.cts_timeout, rec.cts_deadline = timeout, now + timeout
            self._next_deadline = min(self._next_deadline, rec.cts_deadline)
        if retry is not None and rec.remote is None:
            rec.cts_retry, rec.next_cts_request = retry, now + retry
        return rec

    def post_send(
        self,
        region: MemoryRegion,
        offset: int,
        length: int | None,
        imm: int | None,
        now: float = 0.0,
        cts_timeout: float | None = None,
        cts_retry: float | None = None,
    ) -> SendRecord:
        """Queue a one-shot message of region[offset:offset+length] (CTS deadline:
        ``now + cts_timeout``, none when it is None; CTS requests every ``cts_retry``)."""
        length = region.check_range(offset, length)
        self._check_size(length)
        rec = self._new(imm, False, now, cts_timeout, cts_retry)
        rec.length = length
        if length:
            rec._ranges.append(_Range(region, offset, 0, length, 0))
        return rec

    def stream_start(
        self,
        imm: int | None,
        now: float = 0.0,
        cts_timeout: float | None = None,
        cts_retry: float | None = None,
    ) -> SendRecord:
        """Open a streaming send; ranges follow with :meth:`stream_send`."""
        return self._new(imm, True, now, cts_timeout, cts_retry)

    def stream_send(
        self, rec: SendRecord, region: MemoryRegion, src_offset: int, dst_offset: int, length: int
    ) -> None:
        """Queue region[src_offset:+length] for remote bytes [dst_offset, dst_offset+length)."""
        if not rec.stream or rec.ended:
            raise ConfigError("stream_send on a stream that is ended (or not a stream)")
        region.check_range(src_offset, length)
        if dst_offset < 0 or dst_offset % self.attr.mtu:
            raise ConfigError(
                f"dst_offset {dst_offset} must be >= 0 and a multiple of the mtu ({self.attr.mtu})"
            )
        self._check_size(dst_offset + length)
        if length:
            rec._ranges.append(
                _Range(region, src_offset, dst_offset, length, dst_offset // self.attr.mtu)
            )
            rec.length = max(rec.length, dst_offset + length)

    def stream_end(self, rec: SendRecord) -> None:
        """No more ranges: the stream finishes once what is queued is out."""
        rec.ended = True

    def _check_size(self, length: int) -> None:
        if length > self.attr.max_message_size:
            raise ConfigError(
                f"message of {length} bytes exceeds max_message_size {self.attr.max_message_size}"
            )

    def on_cts(self, cts: CTS, now: float) -> None:
        """Match a CTS to the message with the same sequence number (``now``: when it
        came, kept as the record's ``cts_at``)."""
        attr = self.attr
        first = self._queue[0].seq if self._queue else self._next_seq
        valid = (
            cts.msg_id == cts.seq % attr.layout.max_message_ids
            and cts.slot < attr.max_messages
            and cts.generation < attr.generations
            and cts.length <= attr.max_message_size
            and first <= cts.seq < self._next_seq + attr.max_messages  # bounded look-ahead
        )
        if not valid:
            self.counters.control_malformed += 1
            return
        self.counters.cts_received += 1
        for rec in self._queue:
            if rec.seq == cts.seq:
                if rec.remote is None:
                    rec.remote, rec.cts_at = cts, now
                return
        self._cts.setdefault(cts.seq, (cts, now))

    def cts_requests_due(self, now: float) -> list[int]:
        """Sequence numbers to ask a CTS for again at ``now`` (each asked at most once per
        interval: one retry, doubling up to 16 times it)."""
        due = []
        for rec in self._queue:
            if rec.remote is not None or rec.state is not SendState.QUEUED:
                continue
            if rec.cts_retry is not None and now >= rec.next_cts_request:
                rec.cts_requests += 1
                backoff = min(2**rec.cts_requests, _MAX_CTS_BACKOFF)
                rec.next_cts_request = now + rec.cts_retry * backoff
                due.append(rec.seq)
        return due

    def next_timer(self) -> float | None:
        """The earliest CTS deadline or CTS request time of a waiting message."""
        times = [
            t
            for rec in self._queue
            if rec.remote is None and rec.state is SendState.QUEUED
            for t in (rec.cts_deadline, rec.next_cts_request)
            if t is not None and t != math.inf
        ]
        return min(times) if times else None

    def expire(self, now: float) -> None:
        """Fail every message still waiting for its CTS whose deadline is ``now`` or past."""
        if now < self._next_deadline:
            return
        earliest = math.inf
        for rec in self._queue:
            deadline = rec.cts_deadline
            if deadline is None or rec.remote is not None or rec.state is not SendState.QUEUED:
                continue
            if now >= deadline:
                rec.fail(
                    TimeoutError(
                        f"send {rec.seq} ({rec.length} bytes): no clear-to-send from the peer "
                        f"within {rec.cts_timeout:g} s (cts_timeout): the peer has not posted "
                        f"its matching receive (its receive number {rec.seq}), or the CTS was "
                        "lost; a reliable QP recovers lost CTSs"
                    )
                )
                self.counters.cts_timeouts += 1
            else:
                earliest = min(earliest, deadline)
        self._next_deadline = earliest

    def writes(self, budget: int, now: float | None = None) -> list[WriteBatch]:
        """Up to ``budget`` packets to put on the wire now, in posting order.

        With ``now``, messages whose CTS deadline passed fail first (:meth:`expire`).
        """
        if now is not None:
            self.expire(now)
        batches: list[WriteBatch] = []
        if budget <= 0:
            while self._queue and self._queue[0].state is not SendState.QUEUED:
                self._queue.popleft()
            return batches
        for rec in list(self._queue):
            if budget <= 0:
                break
            if rec.state is SendState.QUEUED and rec._ranges and rec.remote is None:
                break  # order-based matching: later messages wait for this CTS
            if rec.remote is None or rec.state is not SendState.QUEUED:
                continue
            budget -= self._emit(rec, budget, batches, 0.0 if now is None else now)
            if rec.ended and not rec._ranges and rec.state is SendState.QUEUED:
                budget -= self._finish(rec, budget, batches)
        while self._queue and self._queue[0].state is not SendState.QUEUED:
            self._queue.popleft()
        return batches

    def _emit(self, rec: SendRecord, budget: int, out: list[WriteBatch], now: float) -> int:
        attr, cts = self.attr, rec.remote
        assert cts is not None
        sent = 0
        while rec._ranges and sent < budget:
            rng = rec._ranges[0]
            end = rng.dst_offset + rng.length
            misaligned = end % attr.mtu and end != cts.length
            if end > cts.length or (not rec.stream and rec.length != cts.length) or misaligned:
                rec.fail(
                    ProtocolError(
                        f"message seq {rec.seq}: writing bytes up to {end} (length {rec.length}) "
                        f"does not fit the matching receive of {cts.length} bytes"
                        + (
                            "; ranges must end on an mtu boundary or at the end"
                            if misaligned
                            else ""
                        )
                    )
                )
                return sent
            last_packet = -(-end // attr.mtu)
            n = min(budget - sent, last_packet - rng.next_packet)
            packets = np.arange(rng.next_packet, rng.next_packet + n, dtype=np.int64)
            starts = packets * attr.mtu
            lengths = np.minimum(attr.mtu, end - starts)
            channels = self._channels(rec, packets, now)
            out.append(
                WriteBatch(
                    region=rng.region,
                    generation=cts.generation,
                    channels=channels.astype(np.uint16),
                    remote_offsets=cts.slot * attr.max_message_size + starts,
                    imms=attr.layout.encode_many(rec.msg_id, packets, rec.imm),
                    src_offsets=rng.src_offset + (starts - rng.dst_offset),
                    lengths=lengths,
                )
            )
            rec._covered[packets % attr.layout.fragments] = True
            self.departures.append((rec, rng.next_packet, rng.next_packet + n))
            rec.packets_sent += n
            rec.bytes_sent += int(lengths.sum())
            self.counters.packets_sent += n
            self.counters.bytes_sent += int(lengths.sum())
            rng.next_packet += n
            sent += n
            if rng.next_packet >= last_packet:
                rec._ranges.popleft()
        return sent

    def _channels(self, rec: SendRecord, packets: np.ndarray, now: float) -> np.ndarray:
        if self.channel_for is not None:
            channels = np.asarray(self.channel_for(rec, packets, now), dtype=np.int64)
            if (
                len(channels) != len(packets)
                or not ((channels >= 0) & (channels < self.attr.channels)).all()
            ):
                raise ConfigError(
                    f"channel_for returned {channels!r} for {len(packets)} packets; "
                    f"expected one channel in [0, {self.attr.channels}) per packet"
                )
            return channels
        return self._round_robin(len(packets))

    def _round_robin(self, n: int) -> np.ndarray:
        channels = (self._next_channel + np.arange(n)) % self.attr.channels
        self._next_channel = (self._next_channel + n) % self.attr.channels
        return channels

    def _finish(self, rec: SendRecord, budget: int, out: list[WriteBatch]) -> int:
        """Carry uncovered immediate fragments, then mark the message done."""
        missing = np.flatnonzero(~rec._covered)
        if len(missing) > budget:
            return 0
        cts, attr = rec.remote, self.attr
        assert cts is not None
        if len(missing):
            n = len(missing)
            channels = self._round_robin(n)
            out.append(
                WriteBatch(
                    region=_NO_REGION,
                    generation=cts.generation,
                    channels=channels.astype(np.uint16),
                    remote_offsets=np.full(n, cts.slot * attr.max_message_size, dtype=np.int64),
                    imms=attr.layout.encode_many(rec.msg_id, missing, rec.imm),
                    src_offsets=np.zeros(n, dtype=np.int64),
                    lengths=np.zeros(n, dtype=np.int64),
                )
            )
            rec._covered[:] = True
            rec.packets_sent += n
            self.counters.packets_sent += n
        rec.state = SendState.DONE
        self.counters.messages_sent += 1
        return len(missing)
