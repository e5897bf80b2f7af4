"""The write side of a reliable connection: its queued and admitted writes and their machines.

A :class:`WriteSide` holds the reliable writes of one
:class:`~sdr.reliability.connection.ReliableConnection`: those waiting for an in-flight
slot (admitted in order: the n-th write lands in the peer's n-th receive), the sender
machine and SDR streams of each admitted one, which lane of which write every send record
is (so departures reach the right machine), and the :class:`~sdr.reliability.schedule.
Schedule` of those machines. A write starts once its first lane has the peer's
clear-to-send, and fails if none comes within the global timeout. Departures and the
machines' verdicts feed the connection's :class:`~sdr.reliability.congestion_books.
CongestionBooks`; every write's sender shares the connection's RTT estimator. The
connection hands it departures and control messages and runs it once per round; it sends
control messages, reports each write's end and each delivery (the connection moves)
through the callables it got.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from sdr.errors import Cancelled, ConfigError, MessageFailed, ProtocolError, ResourceBusy, SDRError
from sdr.errors import TimeoutError as SDRTimeoutError
from sdr.queue_pair import QueuePairCore
from sdr.reliability.base import (
    Delivered,
    Finished,
    Lost,
    Machine,
    Scheme,
    SendChunks,
    SendMessage,
    earliest,
)
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.congestion_books import CongestionBooks
from sdr.reliability.machine_round import run_machine
from sdr.reliability.messages import Abort, ControlMessage, RangeMessage
from sdr.reliability.rtt_estimator import RttEstimator
from sdr.reliability.schedule import Schedule
from sdr.reliability.stall_hold import StallHold
from sdr.reliability.transfers import Outgoing, Register, open_outgoing
from sdr.send_table import SendRecord, SendState
from sdr.transport import MemoryRegion

__all__ = ["WriteSide"]


class WriteSide:
    """The reliable writes of one connection (sans-I/O: every call takes ``now``).

    At most ``max_in_flight`` writes are admitted at once. ``send`` queues a control
    message to the peer; ``over`` hears of each write's end (its seq, length, error or
    None, and its machine's stats); ``moved`` of each delivery (its time).
    """

    def __init__(
        self,
        core: QueuePairCore,
        config: ReliabilityConfig,
        scheme: Scheme,
        register: Register,
        books: CongestionBooks,
        rtt: RttEstimator,
        max_in_flight: int,
        send: Callable[[ControlMessage], None],
        over: Callable[[int, int, SDRError | None, dict[str, int]], None],
        moved: Callable[[float], None],
    ) -> None:
        self.core = core
        self.attr = core.attr
        self.config = config
        self.scheme = scheme
        self._register = register
        self._books = books
        self.rtt = rtt
        self.n_lanes = len(scheme.lanes(0))
        self.max_in_flight = max_in_flight
        self._send = send
        self._over = over
        self._moved = moved
        self._next_seq = 0
        self.waiting: deque[tuple[int, MemoryRegion, int, int]] = deque()
        """Writes waiting for an in-flight slot, in order: (seq, region, offset, length)."""
        self.sending: dict[int, Outgoing] = {}
        """Writes admitted and not finished, by sequence number."""
        self._lane_of: dict[SendRecord, tuple[Outgoing, int]] = {}
        self._schedule = Schedule()
        self._stall = StallHold()
        self._rto_kept = rtt.rto  # the RTO when the write timers were last kept
        self._samples_kept = rtt.samples  # the estimator's samples then

    # --- what the connection asks ---------------------------------------------------------
    def post(self, now: float, region: MemoryRegion, offset: int, length: int) -> int:
        """Queue a write of region[offset:offset+length] (range checked); its seq."""
        if length > self.attr.max_message_size:
            raise ConfigError(
                f"write of {length} bytes exceeds max_message_size {self.attr.max_message_size}"
            )
        cap = self.config.max_queued
        full = bool(self.waiting) or self.in_flight >= self.max_in_flight
        if cap is not None and full and len(self.waiting) >= cap:
            raise ResourceBusy(
                f"{self.in_flight} writes in flight and {len(self.waiting)} waiting "
                f"(max_queued={cap}); retry after one finishes"
            )
        seq = self._next_seq
        self._next_seq += 1
        self.waiting.append((seq, region, offset, length))
        self.admit(now)
        return seq

    def cancel(self, now: float, seq: int) -> bool:
        """Cancel write ``seq`` (see :meth:`ReliableConnection.cancel_write`)."""
        if any(waiting[0] == seq for waiting in self.waiting):
            raise ConfigError(
                f"write seq {seq} waits for an in-flight slot ({self.in_flight} of "
                f"max_in_flight={self.max_in_flight} in flight): only admitted writes can be "
                "cancelled; raise max_in_flight"
            )
        out = self.sending.get(seq)
        if out is None:
            return False
        self._end(now, out, Cancelled(f"write seq {seq} cancelled"))
        return True

    def is_cleared(self, seq: int) -> bool:
        """Write ``seq`` in flight has the peer's clear-to-send on every lane."""
        out = self.sending.get(seq)
        return out is not None and all(lane.has_cts for lane in out.lanes)

    def cleared_at(self, seq: int) -> float | None:
        """When the first lane of write ``seq`` in flight got its clear-to-send (the
        ``now`` of the round that brought it); None without one."""
        out = self.sending.get(seq)
        return out.lanes[0].record.cts_at if out is not None and out.lanes[0].has_cts else None

    def has_left(self, seq: int) -> bool:
        """Write ``seq`` in flight started and every packet its data lane queued so far
        has left (the data's first copies are on the wire); or it is over (its handle may
        not have heard yet)."""
        out = self.sending.get(seq)
        if out is None:  # waiting for a slot, or over
            return seq < self._next_seq and all(w[0] != seq for w in self.waiting)
        return out.started and all(
            lane.has_cts and 0 < lane.queued_packets <= lane.record.packets_sent
            for lane in out.lanes[:1]
        )

    @property
    def in_flight(self) -> int:
        """Writes admitted and not finished."""
        return len(self.sending)

    @property
    def backlogged(self) -> bool:
        """Some admitted write has packets waiting for the pacer."""
        return any(lane.backlogged for o in self.sending.values() for lane in o.lanes)

    def next_timer(self) -> float | None:
        """The earliest deadline of any write's machine or of a write's start."""
        self._check_rto()
        starts = [self._start_deadline(o) for o in self.sending.values() if not o.started]
        return earliest(self._schedule.next_timer(self._machine), *starts)

    def channels_for(self, rec: SendRecord, packets: np.ndarray, now: float) -> np.ndarray:
        """The send table's channel choice under multipath: each chunk on one path."""
        paths = self._books.paths
        assert paths is not None
        owner = self._lane_of.get(rec)
        if owner is None:  # not a lane of a reliable write: spread it
            return np.arange(len(packets)) % self.attr.channels
        out, index = owner
        n_chunks = out.lanes[index].geometry.n_chunks
        return paths.channels(rec, n_chunks, packets, now)

    # --- what reaches it --------------------------------------------------------------------
    def on_departures(self, now: float, departures: list[tuple[SendRecord, int, int]]) -> None:
        """Packets [first, stop) of send records left (the send table's report)."""
        for rec, first, stop in departures:
            owner = self._lane_of.get(rec)
            if owner is not None:
                out, lane = owner
                chunks = out.lanes[lane].departed(first, stop)
                self._books.departed(now, out, lane, chunks)
                if len(chunks) and out.machine.active:
                    self._schedule.touch(out.seq)
                    out.machine.on_sent(now, lane, chunks)

    def on_control(self, now: float, msg: ControlMessage) -> bool:
        """A control message for a write (``TO_SENDER``); False if it was stale."""
        out = self.sending.get(msg.seq)
        if out is None or not out.started:
            return False
        if isinstance(msg, RangeMessage):  # union, never past the message
            msg = msg.clipped(out.lanes[0].geometry.n_chunks)
        self._schedule.touch(out.seq)
        out.machine.on_control(now, msg)
        return True

    # --- one round ------------------------------------------------------------------------
    def admit(self, now: float) -> None:
        """Open the writes that fit, in order: a slot free and room in the send table."""
        send_table = self.core.send
        while self.waiting and len(self.sending) < self.max_in_flight:
            if send_table.in_flight + self.n_lanes > self.attr.max_messages:
                break
            seq, region, offset, length = self.waiting.popleft()
            self.scheme.before_write(now, length)
            out = open_outgoing(
                seq, region, offset, length, self.scheme, self.core, self._register, now,
                self.config.rto, self.config.small_copies,
            )  # fmt: skip
            if out.machine.rtt is not None:
                out.machine.rtt = self.rtt  # a new write starts from what the others measured
            self.sending[seq] = out
            self._schedule.touch(seq)
            for index, lane in enumerate(out.lanes):
                self._lane_of[lane.record] = (out, index)

    def poll(self, now: float) -> None:
        """Every admitted write: fail it (stream failed, CTS mismatch, no CTS in time) or
        start it (its first lane has the CTS)."""
        for out in list(self.sending.values()):
            self._poll(now, out)

    def run_due(self, now: float) -> None:
        """Run the machines an event reached or whose timer is due, and carry out their
        actions (only those: one that neither has no actions to give)."""
        self._check_rto()
        self._check_samples(now)
        for seq in self._schedule.due(now):
            due = self.sending.get(seq)
            if due is not None:
                run_machine(now, due.machine)
                self._carry_out(now, due)
                if seq in self.sending:
                    self._schedule.ran(seq, due.machine)

    # --- inside -----------------------------------------------------------------------------
    def _machine(self, seq: int) -> Machine | None:
        out = self.sending.get(seq)
        return None if out is None else out.machine

    def _check_rto(self) -> None:
        """The writes' RTO comes from the shared estimator: when it fell, every write's
        timers may be earlier than the schedule kept."""
        rto = self.rtt.rto
        if rto < self._rto_kept:
            self._schedule.touch_all()
        self._rto_kept = rto

    def _check_samples(self, now: float) -> None:
        """The shared estimator took a sample: the path answered, so a write backed off
        by its own silence stops backing off (RFC 6298 keeps one back-off per path)."""
        if self.rtt.samples != self._samples_kept:
            self._samples_kept = self.rtt.samples
            for seq, out in self.sending.items():
                if out.machine.end_back_off(now):
                    self._schedule.touch(seq)

    def _poll(self, now: float, out: Outgoing) -> None:
        for lane in out.lanes:
            rec = lane.record
            if rec.state is SendState.FAILED and out.machine.active:
                self._end(now, out, rec.error or ProtocolError("SDR stream failed"))
                return
            mismatch = lane.check_cts(out.seq)
            if mismatch is not None:
                self._send(Abort(out.seq, mismatch=True))
                self._end(now, out, mismatch)
                return
        if not out.started and out.lanes[0].has_cts:
            out.started = True
            self._schedule.touch(out.seq)
            out.machine.start(now)
        elif not out.started and now >= self._start_deadline(out):
            error = SDRTimeoutError(
                f"write seq {out.seq}: no clear-to-send from the receiver within the "
                f"global timeout of {self._start_deadline(out) - out.created:.3g} s; "
                "did the peer post a receive?"
            )
            self._end(now, out, error)

    def _start_deadline(self, out: Outgoing) -> float:
        return out.created + self.config.timeout_for(out.length)

    def _carry_out(self, now: float, out: Outgoing) -> None:
        for action in out.machine.actions():
            if isinstance(action, SendChunks):
                out.lanes[action.lane].queue(self.core, now, action.chunks)
            elif isinstance(action, SendMessage):
                self._send(action.message)
            elif isinstance(action, Delivered | Lost):
                self._signal(now, out, action)
            elif isinstance(action, Finished):
                self._end(now, out, action.error)

    def _signal(self, now: float, out: Outgoing, signal: Delivered | Lost) -> None:
        if isinstance(signal, Delivered):  # the connection moves
            self._moved(now)
            until = self._stall.push(now, self.config.stall_timeout)
            if until is not None:
                for other in self.sending.values():
                    other.machine.hold_deadline(until)
        self._books.signal(now, out, signal)

    def _end(self, now: float, out: Outgoing, error: SDRError | None) -> None:
        if self.sending.pop(out.seq, None) is None:
            return
        self._schedule.forget(out.seq)
        if error is not None and out.machine.active:
            out.machine.finish(error)
            out.machine.actions()
        self._books.ended(now, out, error)
        reason = MessageFailed(f"write seq {out.seq} is over; unsent ranges dropped")
        for lane in out.lanes:
            lane.close(self.core, now, reason)
            self._lane_of.pop(lane.record, None)
            self._books.forget(lane.record)
        self._over(out.seq, out.length, error, out.machine.stats)
        self.admit(now)
