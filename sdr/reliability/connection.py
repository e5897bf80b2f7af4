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

Inside, the connection runs the rounds, routes control messages and keeps the outcomes
(events, counters); three objects it owns hold the state: a
:class:`~sdr.reliability.write_side.WriteSide` (writes queued and admitted, their sender
machines and streams), a :class:`~sdr.reliability.receive_side.ReceiveSide` (receives
posted, their receiver machines, the outcomes a late PROBE asks for) and the
:class:`~sdr.reliability.congestion_books.CongestionBooks` (the controller and the
multipath path choice, fed by the writes).
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from functools import partial

from sdr.congestion import CongestionController
from sdr.errors import ConfigError, ProtocolError, SDRError
from sdr.queue_pair import QueuePairCore
from sdr.reliability.base import Scheme, earliest
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.congestion_books import CongestionBooks, congestion_controller
from sdr.reliability.events import (
    Event,
    MessageFailedEvent,
    ReceiveCompleted,
    RtoAdvice,
    WriteCompleted,
)
from sdr.reliability.messages import ControlMessage, decode_message, is_reliability_message
from sdr.reliability.multipath import ChunkPaths
from sdr.reliability.receive_side import ReceiveSide
from sdr.reliability.registry import create_scheme
from sdr.reliability.rto_check import spurious_repair_warning
from sdr.reliability.rtt_estimator import RttEstimator
from sdr.reliability.sr_sender import max_rto
from sdr.reliability.transfers import Register
from sdr.reliability.write_side import WriteSide
from sdr.transport import CompletionBatch, MemoryRegion, WriteBatch

__all__ = ["ReliableConnection", "congestion_controller"]

log = logging.getLogger(__name__)

_FINISHED_MEMORY = 4096  # finished receives whose outcome a late PROBE can still ask
_UNHANDLED_MAX = 1024


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
        self._events: deque[Event] = deque()
        self.rtt = RttEstimator(config.rto, max(max_rto(config.timeout_for(0)), config.rto))
        """SRTT/RTTVAR of the path, shared by every write's sender (RFC 6298)."""
        self.progress_at = -math.inf
        """When a chunk of any message was last newly acknowledged or arrived (the
        driver's clock): what a no-progress timeout of the application watches."""
        self._warned_rto = False
        self.books = CongestionBooks(config, self.attr, self.scheme.acks_progressively)
        """The controller's and the multipath selector's books of this connection's writes."""
        self.writes = WriteSide(
            core, config, self.scheme, register, self.books, self.rtt, self.max_in_flight,
            send=self._send, over=partial(self._finish, "write"), moved=self._moved,
        )  # fmt: skip
        """The writes: waiting, admitted, their machines and schedule."""
        self.receives = ReceiveSide(
            core, self.scheme, register, send=self._send, over=partial(self._finish, "receive"),
            finished_memory=_FINISHED_MEMORY,
        )  # fmt: skip
        """The receives: waiting to be posted, posted, and the memory of finished ones."""
        if self.books.paths is not None:
            core.choose_channels_with(self.writes.channels_for)

    @property
    def controller(self) -> CongestionController | None:
        """The congestion controller (None: ``fixed``, the QP paces at its rate_limit)."""
        return self.books.controller

    @controller.setter
    def controller(self, controller: CongestionController | None) -> None:
        self.books.controller = controller

    @property
    def paths(self) -> ChunkPaths | None:
        """Per-chunk path choice over the channels (``config.multipath``), else None."""
        return self.books.paths

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
        return self.writes.post(now, region, offset, length)

    def post_recv(
        self, now: float, region: MemoryRegion, offset: int = 0, length: int | None = None
    ) -> int:
        """Post a reliable receive into region[offset:offset+length]; its sequence number."""
        length = region.check_range(offset, length)
        return self.receives.post(now, region, offset, length)

    def cancel_write(self, now: float, seq: int) -> bool:
        """Stop write ``seq`` before it completes: nothing more of it is sent (its unsent
        ranges are dropped, its repairs stop) and it fails with :class:`Cancelled`. For
        messages both ends agreed to drop; the receiver cancels its matching receive.
        False when it had finished already. Only a write in flight can be cancelled (one
        still waiting for a slot would shift the order matching of every later write):
        ConfigError otherwise."""
        return self.writes.cancel(now, seq)

    def cancel_recv(self, now: float, seq: int) -> bool:
        """Stop receive ``seq`` before it completes: its buffer is unbound (packets of it
        that still come are discarded, counted as late; bytes already there stay) and it
        fails with :class:`Cancelled`; the sender is not told (it cancels its write).
        False when it had finished already; ConfigError while it is not posted yet."""
        return self.receives.cancel(now, seq)

    def next_event(self) -> Event | None:
        """The next thing that happened (a write or receive completed, a message failed)."""
        return self._events.popleft() if self._events else None

    def is_admitted(self, seq: int) -> bool:
        """Write ``seq`` left the queue: its lanes are open (it is in flight)."""
        return seq in self.writes.sending

    def is_cleared(self, seq: int) -> bool:
        """Write ``seq`` in flight has the peer's clear-to-send on every lane: the peer
        posted the matching receive (so it is in the same collective call as we are)."""
        return self.writes.is_cleared(seq)

    def cleared_at(self, seq: int) -> float | None:
        """When write ``seq`` in flight got the peer's clear-to-send (None: not yet)."""
        return self.writes.cleared_at(seq)

    def has_left(self, seq: int) -> bool:
        """Write ``seq`` in flight started and its data's first copies are on the wire."""
        return self.writes.has_left(seq)

    @property
    def in_flight(self) -> int:
        """Reliable writes admitted and not finished."""
        return self.writes.in_flight

    @property
    def backlogged(self) -> bool:
        """Some admitted write has packets waiting for the pacer."""
        return self.writes.backlogged

    # --- the driver's side --------------------------------------------------------------
    def receive_completions(self, now: float, batch: CompletionBatch) -> None:
        """Packets landed: the core places them, the machines hear of new chunks."""
        arrivals = self.core.receive_completions(now, batch)
        if self.receives.on_arrivals(now, arrivals, self.config.stall_timeout):
            self._moved(now)  # the connection moves: no receive is stuck

    def receive_control(self, now: float, data: bytes) -> None:
        """A control message arrived: SDR's own go to the core, ours to the machines."""
        self.core.receive_control(now, data)
        while self.core.upper_control:
            self._route(now, self.core.upper_control.popleft())

    def writes_to_send(self, now: float, budget: int) -> list[WriteBatch]:
        """Packets to transmit now (at most ``budget``); their departures reach the machines."""
        self._step(now)
        batches = self.core.writes_to_send(now, self.books.window(budget))
        self.writes.on_departures(now, self.core.take_departures())
        return batches

    def actions_to_do(self) -> list:
        """The core's actions (bind, unbind, seal, reopen, send control) for the driver."""
        return self.core.actions_to_do()

    def get_timer(self) -> float | None:
        """The earliest deadline of the core, of any machine, or of a write's start."""
        return earliest(self.core.get_timer(), self.writes.next_timer(), self.receives.next_timer())

    def handle_timer(self, now: float) -> None:
        """Timers due at ``now``: the core's (CTS requests, deadlines) and the machines'."""
        self.core.handle_timer(now)
        self._step(now)

    # --- one round of internal work -----------------------------------------------------
    def _step(self, now: float) -> None:
        self.receives.post_waiting(now)
        self.writes.admit(now)
        self.writes.poll(now)
        self.writes.run_due(now)
        self.receives.run_due(now)

    def _moved(self, now: float) -> None:
        self.progress_at = now

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
        side = self.writes if msg.TO_SENDER else self.receives
        if not side.on_control(now, msg):
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
            text = spurious_repair_warning(self.counters, self.config, self.books.largest_rtt)
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
