"""The sans-I/O reliable connection: one object a driver feeds, as aioquic's QuicConnection.

A :class:`ReliableConnection` wraps the SDR core of one QP (:class:`~sdr.queue_pair.
QueuePairCore`) and a reliability scheme, and runs the scheme's per-message state machines
over the core's lanes. It never touches a socket or a clock: every call takes ``now``.

In (the application):  ``post_write(now, region, offset, length)``,
                       ``post_recv(now, region, offset, length)`` (both return a sequence
                       number: the n-th write lands in the peer's n-th receive);
in (the driver):       ``receive_completions(now, batch)``, ``receive_control(now, data)``,
                       ``handle_timer(now)``;
out (the driver):      ``writes_to_send(now, budget)``, ``actions_to_do()`` (bind, unbind,
                       seal, reopen, send control), ``get_timer()``;
out (the pacer):       ``pacing_rate`` (bits/s, or None: the QP's own ``rate_limit``);
out (the application): ``next_event()``: :class:`~sdr.reliability.events.WriteCompleted`,
                       :class:`~sdr.reliability.events.ReceiveCompleted`,
                       :class:`~sdr.reliability.events.MessageFailed`,
                       :class:`~sdr.reliability.events.RtoAdvice` (advice, once).

The core reports departures (the send table's packet ranges) and newly complete chunks
(the receive table's events); nothing here polls or diffs their state. Arrivals and
control messages are handed to the machines at once; the machines' work and actions run
once per round, in ``writes_to_send`` (which a driver calls every round, with a budget
of 0 if it must not send) and ``handle_timer``. A lost CTS is the
core's business (CTS requests, :mod:`sdr.control`).

Congestion control (``config.congestion``, :mod:`sdr.congestion`): departures feed the
controller's ``on_sent``, the machines' :class:`~sdr.reliability.base.Delivered` and
:class:`~sdr.reliability.base.Lost` its ``on_ack`` and ``on_loss``; ``writes_to_send``
never lets more than its ``cwnd`` be in flight when the scheme acknowledges as it goes
(``Scheme.acks_progressively``; EC acknowledges a message at its end, so it is paced by
rate alone), and the driver paces at :attr:`pacing_rate`. The blocking shell over it, with
handles and waits, is :class:`sdr.runtime.ReliableQP`.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, OrderedDict, deque

import numpy as np

from sdr.config import QPAttr
from sdr.congestion import CongestionController, controller_for
from sdr.errors import Cancelled, ConfigError, MessageFailed, ProtocolError, ResourceBusy, SDRError
from sdr.errors import TimeoutError as SDRTimeoutError
from sdr.queue_pair import QueuePairCore
from sdr.recv_table import RecvRecord
from sdr.reliability.base import (
    Delivered,
    Finished,
    Lost,
    Machine,
    ReopenChunks,
    Scheme,
    SealChunks,
    SendChunks,
    SendMessage,
    earliest,
)
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.events import (
    Event,
    MessageFailedEvent,
    ReceiveCompleted,
    RtoAdvice,
    WriteCompleted,
)
from sdr.reliability.messages import (
    Abort,
    Ack,
    ControlMessage,
    Probe,
    RangeMessage,
    decode_message,
    is_reliability_message,
)
from sdr.reliability.multipath import ChunkPaths
from sdr.reliability.registry import create_scheme
from sdr.reliability.rto_check import spurious_repair_warning
from sdr.reliability.rtt_estimator import RttEstimator
from sdr.reliability.schedule import Schedule
from sdr.reliability.sr_sender import max_rto
from sdr.reliability.transfers import Incoming, Outgoing, Register, open_outgoing
from sdr.send_table import SendRecord, SendState
from sdr.transport import CompletionBatch, MemoryRegion, WriteBatch

__all__ = ["ReliableConnection"]

log = logging.getLogger(__name__)

_FINISHED_MEMORY = 4096
_UNHANDLED_MAX = 1024


def congestion_controller(config: ReliabilityConfig, attr: QPAttr) -> CongestionController | None:
    """The controller ``config.congestion`` names for a QP of ``attr`` (None for ``fixed``:
    the QP's pacer keeps its ``rate_limit``). It starts at ``link_rate`` (else the QP's
    ``rate_limit``) and never exceeds ``congestion_params["max_rate"]`` (default: that
    rate)."""
    if config.congestion == "fixed":
        return None
    rate = config.link_rate if config.link_rate is not None else attr.rate_limit
    params = dict(config.congestion_params)
    max_rate = params.pop("max_rate", None)
    if rate is None and max_rate is None and config.congestion != "auto":
        raise ConfigError(
            f"congestion {config.congestion!r} needs a rate to start from: set the QP's "
            "rate_limit or [reliability] link_rate (or congestion_params.max_rate)"
        )
    return controller_for(config.congestion, rate, max_rate=max_rate, mtu=attr.mtu, **params)


class ReliableConnection:
    """Reliable writes and receives of one SDR QP core with one scheme (sans-I/O).

    ``register`` turns a scheme's lane buffer (EC parity, say) into a memory region of the
    driver; ``scheme`` defaults to the one ``config`` names. Both ends must use the same
    scheme, k, m and chunk size: reliable message n is SDR message n*lanes + lane on both.
    """

    def __init__(
        self,
        core: QueuePairCore,
        config: ReliabilityConfig,
        register: Register,
        scheme: Scheme | None = None,
    ) -> None:
        self.core = core
        self.attr = core.attr
        self.config = config
        self.scheme = scheme if scheme is not None else create_scheme(config)
        self._register = register
        self.n_lanes = len(self.scheme.lanes(0))
        self.max_in_flight = min(config.max_in_flight, self.attr.max_messages // self.n_lanes)
        if self.max_in_flight < 1:
            raise ConfigError(
                f"scheme {self.scheme.name!r} needs {self.n_lanes} SDR messages per reliable "
                f"message; raise QPAttr.max_messages (now {self.attr.max_messages})"
            )
        self.counters: Counter[str] = Counter()
        """Messages finished, control messages by type, scheme counters summed."""
        self.unhandled_control: deque[bytes] = deque(maxlen=_UNHANDLED_MAX)
        """Control messages outside the reliability range, for the application (the newest
        1024; older ones are dropped, counted as ``control_dropped``)."""
        self._send_seq = 0
        self._recv_seq = 0
        self._waiting: deque[tuple[int, MemoryRegion, int, int]] = deque()
        self._sending: dict[int, Outgoing] = {}
        self._lane_of: dict[SendRecord, tuple[Outgoing, int]] = {}
        self._to_post: deque[Incoming] = deque()
        self._receiving: dict[int, Incoming] = {}
        self._send_schedule = Schedule()
        self._recv_schedule = Schedule()
        """Which writes and receives a round runs (:mod:`sdr.reliability.schedule`)."""
        self._lane_in: dict[RecvRecord, tuple[Incoming, int]] = {}
        self._finished: OrderedDict[int, bool] = OrderedDict()
        self._events: deque[Event] = deque()
        self.rtt = RttEstimator(config.rto, max(max_rto(config.timeout_for(0)), config.rto))
        """SRTT/RTTVAR of the path, shared by every write's sender (RFC 6298)."""
        self._rto_kept = self.rtt.rto  # the RTO when the write timers were last kept
        self.progress_at = -math.inf
        """When a chunk of any message was last newly acknowledged or arrived (the
        driver's clock): what a no-progress timeout of the application watches."""
        self._largest_rtt: float | None = None  # the longest RTT sample (for RtoWarning)
        self._warned_rto = False
        self.controller = congestion_controller(config, self.attr)
        """The congestion controller (None: ``fixed``, the QP paces at its rate_limit)."""
        self._windowed = self.controller is not None and self.scheme.acks_progressively
        self.paths: ChunkPaths | None = None
        """Per-chunk path choice over the channels (``config.multipath``), else None."""
        if config.multipath and self.attr.channels > 1:
            self.paths = ChunkPaths(
                self.attr.channels, self.attr.mtu, self.attr.chunk_size, config.rto
            )
            core.send.channel_for = self._channels_for

    @property
    def pacing_rate(self) -> float | None:
        """Bits/s the driver should pace at now (None: the QP's own rate_limit): the
        controller's rate held inside its ``[min_rate, max_rate]``, so no arithmetic of
        it (a rate of 0 or NaN) reaches the pacer."""
        return None if self.controller is None else self.controller.bounded_pacing_rate

    # --- the application's side ---------------------------------------------------------
    def post_write(
        self, now: float, region: MemoryRegion, offset: int = 0, length: int | None = None
    ) -> int:
        """Queue a reliable write of region[offset:offset+length]; its sequence number.

        ResourceBusy if ``max_queued`` writes already wait for an in-flight slot."""
        length = region.check_range(offset, length)
        if length > self.attr.max_message_size:
            raise ConfigError(
                f"write of {length} bytes exceeds max_message_size {self.attr.max_message_size}"
            )
        cap = self.config.max_queued
        full = bool(self._waiting) or self.in_flight >= self.max_in_flight
        if cap is not None and full and len(self._waiting) >= cap:
            raise ResourceBusy(
                f"{self.in_flight} writes in flight and {len(self._waiting)} waiting "
                f"(max_queued={cap}); retry after one finishes"
            )
        seq = self._send_seq
        self._send_seq += 1
        self._waiting.append((seq, region, offset, length))
        self._admit(now)
        return seq

    def post_recv(
        self, now: float, region: MemoryRegion, offset: int = 0, length: int | None = None
    ) -> int:
        """Post a reliable receive into region[offset:offset+length]; its sequence number."""
        length = region.check_range(offset, length)
        seq = self._recv_seq
        self._recv_seq += 1
        inc = Incoming(seq, region, offset, length, self.scheme.lanes(length))
        self._to_post.append(inc)
        self._receiving[seq] = inc
        self._post(now)
        return seq

    def cancel_write(self, now: float, seq: int) -> bool:
        """Stop write ``seq`` before it completes: nothing more of it is sent (its unsent
        ranges are dropped, its repairs stop) and it fails with :class:`Cancelled`. For
        messages both ends agreed to drop; the receiver cancels its matching receive.
        False when it had finished already. Only a write in flight can be cancelled (one
        still waiting for a slot would shift the order matching of every later write):
        ConfigError otherwise."""
        if any(waiting[0] == seq for waiting in self._waiting):
            raise ConfigError(
                f"write seq {seq} waits for an in-flight slot ({self.in_flight} of "
                f"max_in_flight={self.max_in_flight} in flight): only admitted writes can be "
                "cancelled; raise max_in_flight"
            )
        out = self._sending.get(seq)
        if out is None:
            return False
        self._end_outgoing(now, out, Cancelled(f"write seq {seq} cancelled"))
        return True

    def cancel_recv(self, now: float, seq: int) -> bool:
        """Stop receive ``seq`` before it completes: its buffer is unbound (packets of it
        that still come are discarded, counted as late; bytes already there stay) and it
        fails with :class:`Cancelled`; the sender is not told (it cancels its write).
        False when it had finished already; ConfigError while it is not posted yet."""
        inc = self._receiving.get(seq)
        if inc is None:
            return False
        if inc.machine is None or not inc.fully_posted:
            raise ConfigError(
                f"receive seq {seq} is not posted yet (the receive table is full): only "
                "posted receives can be cancelled"
            )
        if inc.machine.active:
            inc.machine.finish(Cancelled(f"receive seq {seq} cancelled"))
            inc.machine.actions()  # nothing of a cancelled receive is sent
        self._end_incoming(now, inc, Cancelled(f"receive seq {seq} cancelled"))
        return True

    def next_event(self) -> Event | None:
        """The next thing that happened (a write or receive completed, a message failed)."""
        return self._events.popleft() if self._events else None

    def is_admitted(self, seq: int) -> bool:
        """Write ``seq`` left the queue: its lanes are open (it is in flight)."""
        return seq in self._sending

    def is_cleared(self, seq: int) -> bool:
        """Write ``seq`` in flight has the peer's clear-to-send on every lane: the peer
        posted the matching receive (so it is in the same collective call as we are)."""
        out = self._sending.get(seq)
        return out is not None and all(lane.has_cts for lane in out.lanes)

    @property
    def in_flight(self) -> int:
        """Reliable writes admitted and not finished."""
        return len(self._sending)

    @property
    def backlogged(self) -> bool:
        """Some admitted write has packets waiting for the pacer."""
        return any(lane.backlogged for o in self._sending.values() for lane in o.lanes)

    # --- the driver's side --------------------------------------------------------------
    def receive_completions(self, now: float, batch: CompletionBatch) -> None:
        """Packets landed: the core places them, the machines hear of new chunks."""
        progress = False
        for rec, chunks in self.core.receive_completions(now, batch).items():
            owner = self._lane_in.get(rec)
            if owner is not None and len(chunks):
                inc, lane = owner
                if inc.machine is not None and inc.machine.active:
                    self._recv_schedule.touch(inc.seq)
                    inc.machine.on_chunks(now, lane, chunks)
                    progress = True
        stall = self.config.stall_timeout
        if progress:  # the connection moves: no receive is stuck
            self.progress_at = now
            for other in self._receiving.values():
                if other.machine is not None:
                    other.machine.hold_deadline(now + stall)

    def receive_control(self, now: float, data: bytes) -> None:
        """A control message arrived: SDR's own go to the core, ours to the machines."""
        self.core.receive_control(now, data)
        while self.core.upper_control:
            self._route(now, self.core.upper_control.popleft())

    def writes_to_send(self, now: float, budget: int) -> list[WriteBatch]:
        """Packets to transmit now (at most ``budget``); their departures reach the machines."""
        self._step(now)
        cc = self.controller
        if self._windowed and budget > 0 and math.isfinite(cwnd := cc.cwnd):  # type: ignore[union-attr]
            # never less than an RTO at the pacing rate: bytes lost in flight leave the
            # books only when the scheme notices (an RTO at worst), and the window must
            # not stall the sender before that; nor less than two chunks: the receiver
            # acknowledges whole chunks, so a window inside one would never open again
            rate = cc.bounded_pacing_rate  # type: ignore[union-attr]
            cwnd = max(cwnd, rate / 8 * self.config.rto, 2.0 * self.attr.chunk_size)
            room = cwnd - cc.in_flight  # type: ignore[union-attr]
            idle = cc.in_flight <= 0  # type: ignore[union-attr]
            budget = min(budget, max(int(room // self.attr.mtu), 1 if idle else 0))
        batches = self.core.writes_to_send(now, budget)
        departures, self.core.send.departures = self.core.send.departures, []
        for rec, first, stop in departures:
            owner = self._lane_of.get(rec)
            if owner is not None:
                out, lane = owner
                chunks = out.lanes[lane].departed(first, stop)
                if cc is not None:
                    out.last_sent = now
                    if nbytes := out.lanes[lane].count_in_flight(chunks):
                        out.cc_bytes += nbytes
                        cc.on_sent(now, nbytes)
                if len(chunks) and out.machine.active:
                    self._send_schedule.touch(out.seq)
                    out.machine.on_sent(now, lane, chunks)
        return batches

    def actions_to_do(self) -> list:
        """The core's actions (bind, unbind, seal, reopen, send control) for the driver."""
        return self.core.actions_to_do()

    def get_timer(self) -> float | None:
        """The earliest deadline of the core, of any machine, or of a write's start."""
        self._check_rto()
        times = [self.core.get_timer()]
        times.append(self._send_schedule.next_timer(self._write_machine))
        times.append(self._recv_schedule.next_timer(self._receive_machine))
        times += [self._start_deadline(o) for o in self._sending.values() if not o.started]
        return earliest(*times)

    def handle_timer(self, now: float) -> None:
        """Timers due at ``now``: the core's (CTS requests, deadlines) and the machines'."""
        self.core.handle_timer(now)
        self._step(now)

    # --- one round of internal work -----------------------------------------------------
    def _step(self, now: float) -> None:
        self._post(now)
        self._admit(now)
        for out in list(self._sending.values()):
            self._poll_outgoing(now, out)
        # only the machines an event reached or whose timer is due: one that neither
        # has no actions to give (events, timers and work make them)
        self._check_rto()
        for seq in self._send_schedule.due(now):
            due = self._sending.get(seq)
            if due is not None:
                self._run(now, due.machine)
                self._carry_out_sender(now, due)
                if seq in self._sending:
                    self._send_schedule.ran(seq, due.machine)
        for seq in self._recv_schedule.due(now):
            inc = self._receiving.get(seq)
            if inc is not None and inc.machine is not None:
                self._run(now, inc.machine)
                self._carry_out_receiver(now, inc)
                if seq in self._receiving:
                    self._recv_schedule.ran(seq, inc.machine)

    def _write_machine(self, seq: int) -> Machine | None:
        out = self._sending.get(seq)
        return None if out is None else out.machine

    def _receive_machine(self, seq: int) -> Machine | None:
        inc = self._receiving.get(seq)
        return None if inc is None else inc.machine

    def _check_rto(self) -> None:
        """The writes' RTO comes from the shared estimator: when it fell, every write's
        timers may be earlier than the schedule kept."""
        rto = self.rtt.rto
        if rto < self._rto_kept:
            self._send_schedule.touch_all()
        self._rto_kept = rto

    @staticmethod
    def _run(now: float, machine: Machine) -> None:
        deadline = machine.next_timer()
        if deadline is not None and now >= deadline:
            machine.handle_timer(now)
        if machine.has_work():
            machine.do_work(now)

    # --- sending ------------------------------------------------------------------------
    def _admit(self, now: float) -> None:
        send_table = self.core.send
        while self._waiting and len(self._sending) < self.max_in_flight:
            if send_table.in_flight + self.n_lanes > self.attr.max_messages:
                break
            seq, region, offset, length = self._waiting.popleft()
            self.scheme.before_write(now, length)
            out = open_outgoing(
                seq, region, offset, length, self.scheme, self.core, self._register, now,
                self.config.rto,
            )  # fmt: skip
            if out.machine.rtt is not None:
                out.machine.rtt = self.rtt  # a new write starts from what the others measured
            self._sending[seq] = out
            self._send_schedule.touch(seq)
            for index, lane in enumerate(out.lanes):
                self._lane_of[lane.record] = (out, index)

    def _poll_outgoing(self, now: float, out: Outgoing) -> None:
        for lane in out.lanes:
            rec = lane.record
            if rec.state is SendState.FAILED and out.machine.active:
                self._end_outgoing(now, out, rec.error or ProtocolError("SDR stream failed"))
                return
            mismatch = lane.check_cts(out.seq)
            if mismatch is not None:
                self._send(Abort(out.seq, mismatch=True))
                self._end_outgoing(now, out, mismatch)
                return
        if not out.started and out.lanes[0].has_cts:
            out.started = True
            self._send_schedule.touch(out.seq)
            out.machine.start(now)
        elif not out.started and now >= self._start_deadline(out):
            error = SDRTimeoutError(
                f"write seq {out.seq}: no clear-to-send from the receiver within the "
                f"global timeout of {self._start_deadline(out) - out.created:.3g} s; "
                "did the peer post a receive?"
            )
            self._end_outgoing(now, out, error)

    def _start_deadline(self, out: Outgoing) -> float:
        return out.created + self.config.timeout_for(out.length)

    def _carry_out_sender(self, now: float, out: Outgoing) -> None:
        for action in out.machine.actions():
            if isinstance(action, SendChunks):
                out.lanes[action.lane].queue(self.core, now, action.chunks)
            elif isinstance(action, SendMessage):
                self._send(action.message)
            elif isinstance(action, Delivered | Lost):
                self._congestion_signal(now, out, action)
            elif isinstance(action, Finished):
                self._end_outgoing(now, out, action.error)

    def _congestion_signal(self, now: float, out: Outgoing, signal: Delivered | Lost) -> None:
        rtt = signal.rtt_s if isinstance(signal, Delivered) else None
        if rtt is not None:
            self._largest_rtt = max(self._largest_rtt or 0.0, rtt)
        stall = self.config.stall_timeout
        if isinstance(signal, Delivered):  # the connection moves
            self.progress_at = now
            for other in self._sending.values():
                other.machine.hold_deadline(now + stall)
        if self.paths is not None and signal.chunks is not None:
            lane = out.lanes[0].record
            if isinstance(signal, Delivered):
                rtt = self.paths.delivered(now, lane, signal.chunks, rtt, signal.sample_chunk)
            else:
                self.paths.lost(now, lane, signal.chunks)
        cc = self.controller
        if cc is None:
            return
        # the bytes the books counted for these chunks, not the signal's: a chunk
        # delivered or lost again while not counted (a late copy, a repeated verdict)
        # must not take other chunks' bytes off the books
        delivered = isinstance(signal, Delivered)
        if signal.chunks is None:  # a scheme that does not say which: trust its count
            nbytes = min(float(signal.nbytes), out.cc_bytes)
        else:
            nbytes = float(out.lanes[0].settle(signal.chunks, delivered))
        out.cc_bytes -= nbytes
        if isinstance(signal, Delivered):
            cc.on_ack(now, nbytes, rtt)
        elif nbytes:
            cc.on_loss(now, nbytes, None, signal.sent_at)

    def _final_rtt(self, now: float, out: Outgoing) -> float | None:
        """An RTT sample from a write's final ACK, for schemes without SACK samples (EC):
        from its last departure, unless it retransmitted (Karn). It holds the receiver's
        decoding time too: one sample per message, biased high by that."""
        if self._windowed or out.last_sent is None:
            return None
        if out.machine.stats.get("chunks_retransmitted", 0):
            return None
        rtt = now - out.last_sent
        return rtt if rtt > 0 else None

    def _channels_for(self, rec: SendRecord, packets: np.ndarray, now: float) -> np.ndarray:
        """The send table's channel choice under multipath: each chunk on one path."""
        assert self.paths is not None
        owner = self._lane_of.get(rec)
        if owner is None:  # not a lane of a reliable write: spread it
            return np.arange(len(packets)) % self.attr.channels
        out, index = owner
        n_chunks = out.lanes[index].geometry.n_chunks
        return self.paths.channels(rec, n_chunks, packets, now)

    def _end_outgoing(self, now: float, out: Outgoing, error: SDRError | None) -> None:
        if self._sending.pop(out.seq, None) is None:
            return
        self._send_schedule.forget(out.seq)
        if error is not None and out.machine.active:
            out.machine.finish(error)
            out.machine.actions()
        if self.controller is not None and out.cc_bytes > 0:
            # what no SACK covered (EC's parity, a last chunk the final ACK covered,
            # duplicates): delivered with the ACK, or forgotten with a failed write
            if error is None:
                self.controller.on_ack(now, out.cc_bytes, self._final_rtt(now, out))
            else:
                self.controller.on_loss(now, out.cc_bytes, True)
            out.cc_bytes = 0.0
        reason = MessageFailed(f"write seq {out.seq} is over; unsent ranges dropped")
        for lane in out.lanes:
            lane.close(self.core, now, reason)
            self._lane_of.pop(lane.record, None)
            if self.paths is not None:
                self.paths.forget(lane.record)
        self._finish("write", out.seq, out.length, error, out.machine.stats)
        self._admit(now)

    # --- receiving ----------------------------------------------------------------------
    def _post(self, now: float) -> None:
        recv_table = self.core.recv
        while self._to_post:
            inc = self._to_post[0]
            if inc.machine is None and not inc.over:
                if recv_table.active + len(inc.lengths) > self.attr.max_messages:
                    return
                inc.prepare(self.scheme, self._register)
                self._recv_schedule.touch(inc.seq)
            while not inc.fully_posted:
                region, base = inc.lane_regions[len(inc.posted)]
                try:
                    rec = self.core.post_recv(now, region, base, inc.lengths[len(inc.posted)])
                except ResourceBusy:
                    return
                self._lane_in[rec] = (inc, len(inc.posted))
                inc.posted.append(rec)
                if inc.over:
                    self._release(now, rec)
            self._to_post.popleft()

    def _release(self, now: float, rec: RecvRecord) -> None:
        self._lane_in.pop(rec, None)
        self.core.complete_recv(now, rec)  # unbind: late packets are discarded from now on

    def _carry_out_receiver(self, now: float, inc: Incoming) -> None:
        assert inc.machine is not None
        for action in inc.machine.actions():
            if isinstance(action, SendMessage):
                self._send(action.message)
            elif isinstance(action, SealChunks | ReopenChunks):
                inc.guard(self.core, now, action)
            elif isinstance(action, Finished):
                self._end_incoming(now, inc, action.error)

    def _end_incoming(self, now: float, inc: Incoming, error: SDRError | None) -> None:
        if self._receiving.pop(inc.seq, None) is None:
            return
        self._recv_schedule.forget(inc.seq)
        inc.over = True
        for rec in inc.posted:
            self._release(now, rec)
        self._finished[inc.seq] = error is None
        while len(self._finished) > _FINISHED_MEMORY:
            self._finished.popitem(last=False)
        assert inc.machine is not None
        self._finish("receive", inc.seq, inc.length, error, inc.machine.stats)

    # --- control path -------------------------------------------------------------------
    def _route(self, now: float, data: bytes) -> None:
        if self.scheme.on_raw_control(now, data):
            return
        if not is_reliability_message(data):
            if len(self.unhandled_control) == self.unhandled_control.maxlen:
                self.counters["control_dropped"] += 1  # a flood the application does not read
            self.unhandled_control.append(data)
            return
        try:
            msg = decode_message(data)
        except ProtocolError as exc:
            self.counters["control_malformed"] += 1
            log.debug("dropped a malformed control message: %s", exc)
            return
        self.counters[f"received_{type(msg).__name__.lower()}"] += 1
        if msg.TO_SENDER:
            out = self._sending.get(msg.seq)
            if out is not None and out.started:
                if isinstance(msg, RangeMessage):  # union, never past the message
                    msg = msg.clipped(out.lanes[0].geometry.n_chunks)
                self._send_schedule.touch(out.seq)
                out.machine.on_control(now, msg)
            else:
                self.counters["control_stale"] += 1
            return
        inc = self._receiving.get(msg.seq)
        if inc is not None and inc.machine is not None:
            self._recv_schedule.touch(msg.seq)
            inc.machine.on_control(now, msg)
        elif isinstance(msg, Probe) and msg.seq in self._finished:
            self._send(Ack(msg.seq, failed=not self._finished[msg.seq]))
        else:
            self.counters["control_stale"] += 1

    def _send(self, msg: ControlMessage) -> None:
        self.counters[f"sent_{type(msg).__name__.lower()}"] += 1
        self.core.queue_control(msg.encode())

    # --- shared -------------------------------------------------------------------------
    def _finish(
        self, kind: str, seq: int, length: int, error: SDRError | None, stats: dict[str, int]
    ) -> None:
        outcome = "completed" if error is None else "failed"
        self.counters[f"{kind}s_{outcome}"] += 1
        for key, value in stats.items():
            self.counters[f"{kind}_{key}"] += value
        if kind == "write" and not self._warned_rto:
            text = spurious_repair_warning(self.counters, self.config, self._largest_rtt)
            if text is not None:  # an event, not a warning: this layer does no I/O
                self._warned_rto = True
                self._events.append(RtoAdvice(text))
        if error is not None:
            log.info("%s seq %d failed: %s", kind, seq, error)
            self._events.append(MessageFailedEvent(kind, seq, length, error, dict(stats)))
        elif kind == "write":
            self._events.append(WriteCompleted(seq, length, dict(stats)))
        else:
            self._events.append(ReceiveCompleted(seq, length, dict(stats)))
