"""The reliable QP: drives a reliability scheme's state machines over an SDR QP.

This is the only module of sdr.reliability that touches a QP or a clock; the schemes
themselves are sans-I/O. It owns the QP it is given (all its sends, receives and control
messages), so both ends keep the order-based matching in step: reliable message n is SDR
message n*lanes + lane on both sides.

    rqp = ReliableQP(qp, "ec-mds", rtt="25ms", k=32, m=8)
    h = rqp.write(mr, 0, len(buf))          # on the sender
    r = rqp.post_recv(mr)                   # on the receiver
    h.wait(timeout=10); r.wait(timeout=10)

What it adds beyond the machines: in-flight limits (writes beyond ``max_in_flight`` wait
in order), departure tracking for RTOs, CTS re-requests (a lost CTS would otherwise
stall the stream; one CTS_REQUEST per RTO, backing off), answers to PROBEs about
messages already finished, and lane posting for schemes with several lanes.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from sdr.api import QP
from sdr.control import CTS
from sdr.dlpack import to_device, to_host
from sdr.errors import (
    ConfigError,
    MessageFailed,
    ProtocolError,
    ResourceBusy,
    SDRError,
    TimeoutError,
)
from sdr.id_reuse import warn_if_short
from sdr.reliability.base import (
    Finished,
    ReopenChunks,
    SealChunks,
    SendChunks,
    SendControl,
    earliest,
)
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.handles import ReceiveHandle, WriteHandle
from sdr.reliability.messages import (
    Abort,
    Ack,
    ControlMessage,
    CtsRequest,
    Digest,
    EcNack,
    Nack,
    Probe,
    Sack,
    decode_message,
    is_reliability_message,
)
from sdr.reliability.registry import create_scheme
from sdr.reliability.transfers import Incoming, Outgoing, open_outgoing
from sdr.send_table import SendState
from sdr.transport import MemoryRegion

if TYPE_CHECKING:
    from sdr.adaptive.policy import AdaptivePolicy

__all__ = ["ReliableQP"]

log = logging.getLogger(__name__)

_TO_SENDER = (Ack, Sack, Nack, EcNack)
_TO_RECEIVER = (Digest, Probe, Abort)
_FINISHED_MEMORY = 4096
_UNHANDLED_MAX = 1024


class ReliableQP:
    """Reliable writes and receives over one SDR QP with a named reliability scheme.

    ``config``: a :class:`ReliabilityConfig`, a scheme name, or a mapping (a parsed
    ``[reliability]`` table); keyword arguments override its fields. Both ends must use the
    same scheme, k, m and chunk size.

    ``adaptive``: an :class:`sdr.adaptive.AdaptivePolicy` picks the scheme per message
    (both ends need one, same candidates; docs/adaptive.md). Staged GPU regions
    (:mod:`sdr.dlpack`) are copied to the host on ``write``, back on receive completion.
    """

    def __init__(
        self,
        qp: QP,
        config: ReliabilityConfig | str | Mapping[str, Any] | None = None,
        *,
        adaptive: AdaptivePolicy | None = None,
        **overrides: Any,
    ) -> None:
        self.qp = qp
        self.ctx = qp.ctx
        attr = qp.attr
        from sdr.reliability.auto import resolve_for_qp  # noqa: PLC0415 - "auto" lives there

        # the QP's chunk size and rate fill the config; "auto" goes through the selector
        # (keywords drop=, drop_unit=, size_hint=: see sdr.reliability.auto)
        self.config = resolve_for_qp(config, attr, overrides)
        warn_if_short(attr, self.config.rtt, self.config.link_rate)  # type: ignore[arg-type]
        self.adaptive = adaptive
        if adaptive is None:
            self.scheme = create_scheme(self.config)
        else:
            from sdr.adaptive.scheme import AdaptiveScheme  # noqa: PLC0415 - import cycle

            self.scheme = AdaptiveScheme(self.config, adaptive)
        self.n_lanes = len(self.scheme.lanes(0))
        self.max_in_flight = min(self.config.max_in_flight, attr.max_messages // self.n_lanes)
        if self.max_in_flight < 1:
            raise ConfigError(
                f"scheme {self.scheme.name!r} needs {self.n_lanes} SDR messages per reliable "
                f"message; raise QPAttr.max_messages (now {attr.max_messages})"
            )
        self.counters: Counter[str] = Counter()
        """Messages finished, control messages by type, scheme counters summed."""
        self.unhandled_control: deque[bytes] = deque(maxlen=_UNHANDLED_MAX)
        """Control messages outside the reliability range, for the application (the newest
        1024; older ones are dropped, counted as ``control_dropped``)."""
        self._send_seq = 0
        self._recv_seq = 0
        self._waiting: deque[tuple[WriteHandle, MemoryRegion, int]] = deque()
        self._sending: dict[int, Outgoing] = {}
        self._to_post: deque[Incoming] = deque()
        self._receiving: dict[int, Incoming] = {}
        self._finished: OrderedDict[int, bool] = OrderedDict()

    # --- public API ---------------------------------------------------------------------
    def write(self, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> WriteHandle:
        """Reliably write mr[offset:offset+length] into the peer's next posted receive.

        The receive must be exactly ``length`` bytes. Keep the bytes unchanged until the
        handle completes (retransmissions read them again).
        """
        self._check_connected()
        length = mr.check_range(offset, length)
        if length > self.qp.attr.max_message_size:
            raise ConfigError(
                f"write of {length} bytes exceeds max_message_size {self.qp.attr.max_message_size}"
            )
        cap = self.config.max_queued
        full = bool(self._waiting) or self.in_flight >= self.max_in_flight  # this one would wait
        if cap is not None and full and len(self._waiting) >= cap:
            raise ResourceBusy(
                f"{self.in_flight} writes in flight and {len(self._waiting)} waiting "
                f"(max_queued={cap}); retry after one finishes"
            )
        to_host(mr, offset, length)  # a staged GPU region: refresh its host copy
        handle = WriteHandle(self, self._send_seq, length)
        self._send_seq += 1
        self._waiting.append((handle, mr, offset))
        self._admit(self.ctx.now())
        return handle

    def post_recv(
        self, mr: MemoryRegion, offset: int = 0, length: int | None = None
    ) -> ReceiveHandle:
        """Post a reliable receive into mr[offset:offset+length]; the n-th gets the n-th write."""
        self._check_connected()
        length = mr.check_range(offset, length)
        handle = ReceiveHandle(self, self._recv_seq, length)
        self._recv_seq += 1
        inc = Incoming(handle, mr, offset, self.scheme.lanes(length))
        self._to_post.append(inc)
        self._receiving[handle.seq] = inc
        self._post(self.ctx.now())
        return handle

    def _check_connected(self) -> None:
        if not self.qp.connected:
            raise ConfigError("connect the QP (qp.connect(peer_info)) before reliable I/O")

    def progress(self) -> int:
        """One round: SDR progress, control in, events to machines, actions out."""
        now = self.ctx.now()
        work = self.ctx.progress()
        work += self._post(now) + self._admit(now)
        # arrivals before control: a PROBE must see the chunks that landed with it
        for inc in list(self._receiving.values()):
            if inc.machine is not None and inc.machine.active:
                for lane, chunks in inc.arrivals():
                    inc.machine.on_chunks(now, lane, chunks)
                    work += 1
        for out in list(self._sending.values()):
            work += self._poll_outgoing(now, out)
        for data in self.qp.poll_control():
            work += 1
            self._route(now, data)
        for out in list(self._sending.values()):
            work += self._step(now, out.machine) + self._carry_out_sender(now, out)
        for inc in list(self._receiving.values()):
            if inc.machine is not None:
                work += self._step(now, inc.machine) + self._carry_out_receiver(inc)
        return work + self.ctx.progress()

    def next_timer(self) -> float | None:
        """The earliest deadline of any machine or CTS re-request."""
        times = [m.machine.next_timer() for m in self._sending.values()]
        times += [i.machine.next_timer() for i in self._receiving.values() if i.machine]
        rto = self.config.rto
        times += [lane.cts_deadline(rto) for o in self._sending.values() for lane in o.lanes]
        times += [self._start_deadline(o) for o in self._sending.values() if not o.started]
        return earliest(*times)

    def idle_step(self) -> float:
        """Longest idle wait that keeps a paced sender busy: one chunk at the rate limit
        while queued data waits for the pacer, else unbounded (timers bound the wait)."""
        rate = self.qp.attr.rate_limit
        if not rate or not any(lane.backlogged for o in self._sending.values() for lane in o.lanes):
            return float("inf")
        return self.qp.attr.chunk_size * 8 / rate  # type: ignore[operator]

    @property
    def in_flight(self) -> int:
        """Reliable writes admitted and not finished."""
        return len(self._sending)

    # --- sending ------------------------------------------------------------------------
    def _admit(self, now: float) -> int:
        started = 0
        attr, send_table = self.qp.attr, self.qp.core.send
        while self._waiting and len(self._sending) < self.max_in_flight:
            if send_table.in_flight + self.n_lanes > attr.max_messages:
                break
            handle, mr, offset = self._waiting.popleft()
            if self.adaptive is not None:
                self.adaptive.before_write(now, handle.length)
            self._sending[handle.seq] = open_outgoing(handle, mr, offset, self.scheme, self.qp, now)
            started += 1
        return started

    def _poll_outgoing(self, now: float, out: Outgoing) -> int:
        work = 0
        for lane in out.lanes:
            rec = lane.stream.record
            if rec.state is SendState.FAILED and out.machine.active:
                self._end_outgoing(out, rec.error or ProtocolError("SDR stream failed"))
                return 1
            mismatch = lane.check_cts(out.handle.seq)
            if mismatch is not None:
                self._send_control(Abort(out.handle.seq, mismatch=True))
                self._end_outgoing(out, mismatch)
                return 1
        if not out.started and out.lanes[0].has_cts:
            out.started = True
            out.machine.start(now)
            work += 1
        elif not out.started and now >= self._start_deadline(out):
            self._end_outgoing(
                out,
                TimeoutError(
                    f"write seq {out.handle.seq}: no clear-to-send from the receiver within the "
                    f"global timeout of {self._start_deadline(out) - out.lanes[0].created:.3g} s; "
                    "did the peer post a receive?"
                ),
            )
            return 1
        for index, lane in enumerate(out.lanes):
            left = lane.departed()
            if len(left):
                out.machine.on_sent(now, index, left)
                work += 1
            deadline = lane.cts_deadline(self.config.rto)
            if deadline is not None and now >= deadline:
                self._send_control(CtsRequest(out.handle.seq, lane.stream.record.seq))
                lane.last_cts_request = now
                lane.cts_requests += 1
                work += 1
        return work

    def _start_deadline(self, out: Outgoing) -> float:
        return out.lanes[0].created + self.config.timeout_for(out.handle.length)

    def _carry_out_sender(self, now: float, out: Outgoing) -> int:
        actions = out.machine.actions()
        for action in actions:
            if isinstance(action, SendChunks):
                out.lanes[action.lane].queue(action.chunks)
            elif isinstance(action, SendControl):
                self._send_control(action.message)
            elif isinstance(action, Finished):
                self._end_outgoing(out, action.error)
        return len(actions)

    def _end_outgoing(self, out: Outgoing, error: SDRError | None) -> None:
        if out.handle.finished:
            return
        if error is not None and out.machine.active:
            out.machine.finish(error)
            out.machine.actions()
        reason = MessageFailed(f"write seq {out.handle.seq} is over; unsent ranges dropped")
        for lane in out.lanes:
            lane.close(reason)
        self._sending.pop(out.handle.seq, None)
        self._record(out.handle, error, out.machine.stats)
        self._admit(self.ctx.now())

    # --- receiving ----------------------------------------------------------------------
    def _post(self, now: float) -> int:
        posted = 0
        recv_table, attr = self.qp.core.recv, self.qp.attr
        while self._to_post:
            inc = self._to_post[0]
            if inc.machine is None and not inc.over:
                if recv_table.active + len(inc.lengths) > attr.max_messages:
                    break
                inc.prepare(self.scheme, self.ctx)
            while not inc.fully_posted:
                region, base = inc.lane_regions[len(inc.posted)]
                try:
                    h = self.qp.post_recv(region, base, inc.lengths[len(inc.posted)])
                except ResourceBusy:
                    return posted
                inc.posted.append(h)
                inc.seen.append(np.zeros(h.record.bitmap.n_chunks, dtype=bool))
                if inc.over:
                    h.complete()
                posted += 1
            self._to_post.popleft()
        return posted

    def _carry_out_receiver(self, inc: Incoming) -> int:
        assert inc.machine is not None
        actions = inc.machine.actions()
        for action in actions:
            if isinstance(action, SendControl):
                self._send_control(action.message)
            elif isinstance(action, SealChunks | ReopenChunks):
                inc.guard(action)
            elif isinstance(action, Finished):
                self._end_incoming(inc, action.error)
        return len(actions)

    def _end_incoming(self, inc: Incoming, error: SDRError | None) -> None:
        inc.over = True
        for h in inc.posted:
            h.complete()  # unbind: late packets are discarded from now on
        self._receiving.pop(inc.handle.seq, None)
        self._finished[inc.handle.seq] = error is None
        if error is None:
            to_device(inc.region, inc.offset, inc.handle.length)  # a staged GPU region
        while len(self._finished) > _FINISHED_MEMORY:
            self._finished.popitem(last=False)
        assert inc.machine is not None
        self._record(inc.handle, error, inc.machine.stats)

    # --- control path -------------------------------------------------------------------
    def _route(self, now: float, data: bytes) -> None:
        if self.adaptive is not None and self.adaptive.on_control(now, data):
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
        if isinstance(msg, _TO_SENDER):
            out = self._sending.get(msg.seq)
            if out is not None and out.started:
                if isinstance(msg, Sack | Nack | EcNack):  # union, never past the message
                    msg = msg.clipped(out.lanes[0].geometry.n_chunks)
                out.machine.on_control(now, msg)
            else:
                self.counters["control_stale"] += 1
        elif isinstance(msg, CtsRequest):
            self._resend_cts(msg)
        elif isinstance(msg, _TO_RECEIVER):
            inc = self._receiving.get(msg.seq)
            if inc is not None and inc.machine is not None:
                inc.machine.on_control(now, msg)
            elif isinstance(msg, Probe) and msg.seq in self._finished:
                self._send_control(Ack(msg.seq, failed=not self._finished[msg.seq]))
            else:
                self.counters["control_stale"] += 1

    def _resend_cts(self, msg: CtsRequest) -> None:
        if msg.seq in self._finished:  # the message is over here: what the sender lacks is the ACK
            self._send_control(Ack(msg.seq, failed=not self._finished[msg.seq]))
            return
        inc = self._receiving.get(msg.seq)
        for h in inc.posted if inc is not None else ():
            rec = h.record
            if rec.seq == msg.sdr_seq and not h.completed:
                cts = CTS(rec.seq, rec.msg_id, rec.slot, rec.generation, rec.length)
                self.qp.send_control(cts.encode())
                self.counters["cts_resent"] += 1

    def _send_control(self, msg: ControlMessage) -> None:
        self.counters[f"sent_{type(msg).__name__.lower()}"] += 1
        self.qp.send_control(msg.encode())

    # --- shared -------------------------------------------------------------------------
    def _step(self, now: float, machine: Any) -> int:
        work = 0
        deadline = machine.next_timer()
        if deadline is not None and now >= deadline:
            machine.handle_timer(now)
            work += 1
        if machine.has_work():
            machine.do_work(now)
            work += 1
        return work

    def _record(
        self, handle: WriteHandle | ReceiveHandle, error: SDRError | None, stats: dict[str, int]
    ) -> None:
        handle._finish(error, stats)
        outcome = "completed" if error is None else "failed"
        self.counters[f"{handle.kind}s_{outcome}"] += 1
        for key, value in stats.items():
            self.counters[f"{handle.kind}_{key}"] += value
        if error is not None:
            log.info("%s seq %d failed: %s", handle.kind, handle.seq, error)
