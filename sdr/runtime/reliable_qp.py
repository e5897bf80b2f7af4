"""The reliable QP: the blocking shell over a :class:`~sdr.reliability.ReliableConnection`.

It owns the SDR QP it is given (all its sends, receives and control messages): the QP's
progress loop feeds the connection instead of the bare core, so both ends keep the
order-based matching in step (reliable message n is SDR message n*lanes + lane on both).
This shell adds what the sans-I/O connection must not do: read the clock, register lane
buffers with the driver, stage GPU regions, hand out handles that block.

    rqp = ReliableQP(qp, "ec-mds", rtt="25ms", k=32, m=8)
    h = rqp.write(mr, 0, len(buf))          # on the sender
    r = rqp.post_recv(mr)                   # on the receiver
    h.wait(timeout=10); r.wait(timeout=10)
"""

from __future__ import annotations

import warnings
from collections import Counter, deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sdr.dlpack import to_device, to_host
from sdr.errors import ConfigError
from sdr.id_reuse import warn_if_short
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.connection import ReliableConnection
from sdr.reliability.events import MessageFailedEvent, ReceiveCompleted, RtoAdvice, WriteCompleted
from sdr.reliability.registry import create_scheme
from sdr.reliability.rto_check import RtoWarning
from sdr.runtime.auto_scheme import resolve_for_qp
from sdr.runtime.handles import HandleState, ReceiveHandle, WriteHandle
from sdr.runtime.qp import QP
from sdr.transport import MemoryRegion

if TYPE_CHECKING:
    from sdr.adaptive.policy import AdaptivePolicy
    from sdr.reliability.base import Scheme

__all__ = ["ReliableQP"]


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
        # the QP's chunk size and rate fill the config; "auto" goes through the selector
        # (keywords drop=, drop_unit=, size_hint=: see sdr.runtime.auto_scheme)
        self.config = resolve_for_qp(config, attr, overrides)
        if self.config.final_check is None:  # only where the driver cannot refuse writes
            guarded = qp.transport_qp.guards_placement
            self.config = self.config.replace(final_check=not guarded)
        warn_if_short(attr, self.config.rtt, self.config.link_rate)
        self.adaptive = adaptive
        scheme: Scheme
        if adaptive is None:
            scheme = create_scheme(self.config)
        else:
            from sdr.adaptive.scheme import AdaptiveScheme  # noqa: PLC0415 - optional part

            scheme = AdaptiveScheme(self.config, adaptive)
        self.connection = ReliableConnection(qp.core, self.config, self.ctx.register, scheme)
        """The sans-I/O protocol object this shell drives (the QP's loop feeds it)."""
        qp.protocol = self.connection
        self._writes: dict[int, WriteHandle] = {}
        self._pending: deque[WriteHandle] = deque()  # writes not admitted yet, in order
        self._receives: dict[int, ReceiveHandle] = {}
        self._regions: dict[int, tuple[MemoryRegion, int]] = {}
        self.finished_count = 0
        """Writes and receives finished so far (completed, failed or cancelled): one
        that watches many handles looks at them again only when this moved."""

    @property
    def scheme(self) -> Scheme:
        return self.connection.scheme

    @property
    def n_lanes(self) -> int:
        return self.connection.n_lanes

    @property
    def max_in_flight(self) -> int:
        return self.connection.max_in_flight

    @property
    def counters(self) -> Counter[str]:
        """Messages finished, control messages by type, scheme counters summed."""
        return self.connection.counters

    @property
    def unhandled_control(self) -> deque[bytes]:
        """Control messages outside the reliability range, for the application (the newest
        1024; older ones are dropped, counted as ``control_dropped``)."""
        return self.connection.unhandled_control

    @property
    def in_flight(self) -> int:
        """Reliable writes admitted and not finished."""
        return self.connection.in_flight

    # --- public API ---------------------------------------------------------------------
    def write(self, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> WriteHandle:
        """Reliably write mr[offset:offset+length] into the peer's next posted receive.

        The receive must be exactly ``length`` bytes. Keep the bytes unchanged until the
        handle completes (retransmissions read them again).
        """
        self._check_connected()
        length = mr.check_range(offset, length)
        to_host(mr, offset, length)  # a staged GPU region: refresh its host copy
        seq = self.connection.post_write(self.ctx.now(), mr, offset, length)
        handle = WriteHandle(self, seq, length)
        self._writes[seq] = handle
        self._pending.append(handle)
        self._collect()
        return handle

    def post_recv(
        self, mr: MemoryRegion, offset: int = 0, length: int | None = None
    ) -> ReceiveHandle:
        """Post a reliable receive into mr[offset:offset+length]; the n-th gets the n-th write."""
        self._check_connected()
        length = mr.check_range(offset, length)
        seq = self.connection.post_recv(self.ctx.now(), mr, offset, length)
        handle = ReceiveHandle(self, seq, length)
        handle.state = HandleState.ACTIVE
        self._receives[seq] = handle
        self._regions[seq] = (mr, offset)
        self._collect()
        return handle

    def cleared(self, handle: WriteHandle) -> bool:
        """The peer posted the receive this write goes to (its clear-to-send is here);
        True once the write finished, False while it waits for a slot or was cancelled."""
        return handle.done or self.connection.is_cleared(handle.seq)

    def cleared_at(self, handle: WriteHandle) -> float | None:
        """When this write's clear-to-send came (the transport's clock at the start of
        the round that read it: arrival time, not when someone asked); None while it
        waits for one, or once the write finished."""
        return None if handle.done else self.connection.cleared_at(handle.seq)

    def sent(self, handle: WriteHandle) -> bool:
        """Every data packet of this write has left at least once (repairs and an EC
        write's parity may follow), or it finished: a caller about to stop progressing
        can see a message out first."""
        return handle.finished or self.connection.has_left(handle.seq)

    def cancel(self, handle: WriteHandle | ReceiveHandle) -> bool:
        """Cancel a write or receive of this QP before it completes, when both ends agreed
        to drop it (each cancels its side): it fails with :class:`sdr.errors.Cancelled`
        and nothing more of it crosses the link. False when it had finished already.
        Only messages in flight can be cancelled (ConfigError for a write still waiting
        for one of ``max_in_flight`` slots: order matching would shift)."""
        if handle.rqp is not self:
            raise ConfigError(f"{handle!r} belongs to another reliable QP")
        if handle.finished:
            return False
        now = self.ctx.now()
        if isinstance(handle, WriteHandle):
            cancelled = self.connection.cancel_write(now, handle.seq)
        else:
            cancelled = self.connection.cancel_recv(now, handle.seq)
        self._collect()
        return cancelled

    def _check_connected(self) -> None:
        if not self.qp.connected:
            raise ConfigError("connect the QP (qp.connect(peer_info)) before reliable I/O")

    def progress(self) -> int:
        """One round of the QP's loop (which feeds the connection); handles follow events."""
        work = self.ctx.progress()
        return work + self._collect()

    def flush(self) -> int:
        """Put the writes the pacer allows on the wire now, before reading what arrived
        (:meth:`QP.send_pending`); a :meth:`progress` round does both, sending last."""
        work = self.qp.send_pending()
        return work + self._collect()

    def next_timer(self) -> float | None:
        """The earliest deadline of the connection (its core, machines, write starts)."""
        return self.connection.get_timer()

    def quiet(self) -> bool:
        """Nothing for another round to do right now: no packet waiting (where the
        transport can tell) and the pacer holds any queued data back. The driver then
        waits instead of running a round that finds nothing (one after each batch: 50
        us on the receiver, 90 on the sender, ~10% of their CPU per byte)."""
        if self.ctx.transport.maybe_readable():
            return False
        if not self.connection.backlogged:
            return True
        wait = self.qp.pacer_wait()
        return wait is not None and wait > 0

    def idle_step(self) -> float:
        """Longest idle wait that keeps a paced sender busy, while queued data waits for
        the pacer: until the pacer next allows a batch, where the transport can say;
        else, or when the pacer allows one already and still nothing went (a window
        holds the data), one chunk time at the rate. Unbounded otherwise (timers bound
        the wait).

        Waking each chunk time whatever the pacer said cost 1.5 empty progress rounds
        per batch sent (80 us each on the sender: ~20% of its CPU per byte); but a
        sender whose pacer refilled between its last round and its wait must not sleep
        until the next ACK (it did: up to 70 ms, 256 MiB took 1.5x as long)."""
        rate = self.connection.pacing_rate or self.qp.attr.rate_limit
        if not rate or not self.connection.backlogged:
            return float("inf")
        wait = self.qp.pacer_wait()
        if wait is None or wait <= 0:
            return self.qp.attr.chunk_size * 8 / rate
        return wait

    def hold(self) -> float:
        """Seconds the driver may leave arriving packets and control messages unread after
        a round that worked, without delaying anything (a NIC's interrupt moderation:
        fewer, larger rounds); 0: do not hold.

        A posted receive cannot complete before the bytes it still lacks cross the link
        at its rate, so the hold is never longer than that for the nearest one (the
        rate unknown: no hold); nor than the SACK interval, so a hole's NACK and the
        peer's RTT samples are late by at most that. A sender whose pacer holds its
        queued data back reads the SACKs when it next sends (the pacer's wait); one
        that waits for acknowledgements (a window, the last ACKs) does not hold. Rounds
        then come once per SACK interval or pacing batch, not once per arrival."""
        if not self.ctx.transport.can_hold:
            return 0.0
        limits = [h for h in (self._receive_hold(), self._send_hold()) if h is not None]
        return min(limits) if limits else 0.0

    def _receive_hold(self) -> float | None:
        """The receives' bound on the hold (None: no receive posted)."""
        least = self.connection.receives.least_to_come()
        if least is None:
            return None
        rate = self.config.link_rate or self.qp.attr.rate_limit
        if not rate:
            return 0.0
        config = self.config  # SACKs come sooner while a hole is open
        delay = config.ack_delay_gapped if self.connection.receives.gapped() else config.ack_delay
        return min(least * 8 / rate, delay)

    def _send_hold(self) -> float | None:
        """The writes' bound on the hold (None: no write in flight)."""
        if not self.connection.in_flight:
            return None
        if not self.connection.backlogged:
            return 0.0
        wait = self.qp.pacer_wait()
        return wait if wait else 0.0

    def _collect(self) -> int:
        """Finish the handles of the connection's events."""
        n = 0
        while self._pending:  # admission is in order: stop at the first still waiting
            head = self._pending[0]
            if head.state is HandleState.PENDING:
                if not self.connection.is_admitted(head.seq):
                    break  # waiting (or finished this round: its event comes below)
                head.state = HandleState.ACTIVE
            self._pending.popleft()
        while (event := self.connection.next_event()) is not None:
            if isinstance(event, RtoAdvice):  # advice, not a finished message
                warnings.warn(event.text, RtoWarning, stacklevel=4)
                continue
            n += 1
            self.finished_count += 1
            if isinstance(event, WriteCompleted):
                self._writes.pop(event.seq)._finish(None, event.stats)
            elif isinstance(event, ReceiveCompleted):
                mr, offset = self._regions.pop(event.seq)
                to_device(mr, offset, event.length)  # a staged GPU region
                self._receives.pop(event.seq)._finish(None, event.stats)
            elif isinstance(event, MessageFailedEvent):
                if event.kind == "write":
                    self._writes.pop(event.seq)._finish(event.error, event.stats)
                else:
                    self._regions.pop(event.seq, None)
                    self._receives.pop(event.seq)._finish(event.error, event.stats)
        return n
