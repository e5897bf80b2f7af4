"""The sans-I/O SDR queue pair: send and receive tables behind one event interface.

Shape as in aioquic's connection: a driver feeds events with an explicit ``now``
(control messages, completion batches, timers) and pulls work (packets to send, actions to
carry out). Nothing here touches a socket or a clock, so the same object runs over UDP,
verbs, offload workers and inside the simulator.

The driver interface, shared with :class:`sdr.reliability.ReliableConnection` (which wraps
one of these, so a driver feeds either the same way):

- in: ``receive_completions(now, batch)``, ``receive_control(now, data)``,
  ``handle_timer(now)``;
- out: ``writes_to_send(now, budget)``, ``actions_to_do()`` (bind, unbind, seal, reopen,
  send control), ``get_timer()``.

The core owns its timers: a message still without a CTS after its ``cts_retry`` asks for
it again (a CTS request, :mod:`sdr.control`); the receiver's core answers with the CTS of
that receive if it is still posted.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sdr.actions import Action, SendControl
from sdr.config import QPAttr
from sdr.control import (
    CTS,
    CTS_REQUEST_TYPE,
    CTS_TYPE,
    SDR_TYPES,
    decode_cts,
    decode_cts_request,
    encode_cts_request,
    message_type,
)
from sdr.counters import QPCounters
from sdr.errors import ProtocolError, RemoteProtocolError
from sdr.recv_table import RecvRecord, RecvTable
from sdr.send_table import ChannelPicker, SendRecord, SendTable
from sdr.transport import CompletionBatch, MemoryRegion, WriteBatch

__all__ = ["MAX_QUEUED_CONTROL", "QueuePairCore"]

MAX_QUEUED_CONTROL = 1024
"""Most control messages waiting for the layer above (:attr:`QueuePairCore.upper_control`)
and, in the drivers, for the core: a queue fed from the network. Beyond it the newest are
dropped (tail drop, like a NIC's receive queue) and counted as ``control_dropped``.
At the 4 KiB largest control message this caps a queue at 4 MiB."""


class QueuePairCore:
    """Protocol state of one SDR QP (both directions)."""

    def __init__(self, attr: QPAttr) -> None:
        self.attr = attr
        self.counters = QPCounters()
        self.recv = RecvTable(attr, self.counters)
        self.send = SendTable(attr, self.counters)
        self._actions: deque[Action] = deque()
        self.upper_control: deque[bytes] = deque()
        """Control messages for the layer above (reliability schemes), in arrival order;
        at most :data:`MAX_QUEUED_CONTROL` (later ones are dropped: ``control_dropped``)."""

    # --- receive side -----------------------------------------------------------------
    def post_recv(
        self,
        now: float,
        region: MemoryRegion,
        offset: int = 0,
        length: int | None = None,
        cts_copies: int = 1,
    ) -> RecvRecord:
        """Post the next receive; its CTS goes out ``cts_copies`` times (a tiny message
        whose lost CTS would cost the sender's CTS request, an RTO)."""
        rec, actions = self.recv.post(region, offset, length, cts_copies)
        self._actions.extend(actions)
        return rec

    def complete_recv(self, now: float, rec: RecvRecord) -> None:
        self._actions.extend(self.recv.complete(rec))

    def seal_chunks(self, now: float, rec: RecvRecord, chunks: object) -> None:
        """These chunks of ``rec`` are verified: no packet may rewrite them (driver guard)."""
        self._actions.extend(self.recv.seal(rec, np.asarray(chunks, dtype=np.int64)))

    def reopen_chunks(self, now: float, rec: RecvRecord, chunks: object) -> None:
        """These chunks of ``rec`` failed a check: clear their bits, accept a repair."""
        self._actions.extend(self.recv.reopen(rec, np.asarray(chunks, dtype=np.int64)))

    def receive_completions(
        self, now: float, batch: CompletionBatch
    ) -> dict[RecvRecord, np.ndarray]:
        """Apply packet completions from the driver; returns, per receive they reached,
        the chunks they completed (the event :meth:`RecvTable.on_completions` reports)."""
        return self.recv.on_completions(batch)

    # --- send side --------------------------------------------------------------------
    def post_send(
        self,
        now: float,
        region: MemoryRegion,
        offset: int = 0,
        length: int | None = None,
        imm: int | None = None,
        cts_timeout: float | None = None,
        cts_retry: float | None = None,
    ) -> SendRecord:
        """Queue a one-shot message; with ``cts_timeout`` it fails (sdr.TimeoutError) if
        no clear-to-send arrived by ``now + cts_timeout`` (checked on the ``now`` fed to
        :meth:`writes_to_send` or :meth:`handle_timer`); with ``cts_retry`` a missing CTS
        is asked for again after that many seconds (then doubling, up to 16 times)."""
        return self.send.post_send(region, offset, length, imm, now, cts_timeout, cts_retry)

    def stream_start(
        self,
        now: float,
        imm: int | None = None,
        cts_timeout: float | None = None,
        cts_retry: float | None = None,
    ) -> SendRecord:
        """Open a streaming send (no CTS deadline unless ``cts_timeout`` is given; CTS
        requests every ``cts_retry`` while it has none)."""
        return self.send.stream_start(imm, now, cts_timeout, cts_retry)

    def stream_send(
        self,
        now: float,
        rec: SendRecord,
        region: MemoryRegion,
        src_offset: int,
        dst_offset: int,
        length: int,
    ) -> None:
        self.send.stream_send(rec, region, src_offset, dst_offset, length)

    def stream_end(self, now: float, rec: SendRecord) -> None:
        self.send.stream_end(rec)

    def take_departures(self) -> list[tuple[SendRecord, int, int]]:
        """(record, first packet, stop packet) of every batch :meth:`writes_to_send`
        handed out since the last call: what the layer above times and paths by."""
        return self.send.take_departures()

    def choose_channels_with(self, pick: ChannelPicker | None) -> None:
        """Let ``pick(record, packets, now)`` give each packet's channel (multipath: a
        chunk's path); None: round robin over the channels."""
        self.send.channel_for = pick

    def writes_to_send(self, now: float, budget: int) -> list[WriteBatch]:
        """Packets to transmit now, at most ``budget`` (the driver's pacing allowance).

        Also fails the sends whose CTS deadline has passed at ``now`` (even with no budget).
        """
        return self.send.writes(budget, now)

    @property
    def pacing_rate(self) -> float | None:
        """None: the core runs no congestion controller (the QP paces at its rate_limit)."""
        return None

    def get_timer(self) -> float | None:
        """The earliest ``now`` at which :meth:`handle_timer` has work (None: no timer)."""
        return self.send.next_timer()

    def handle_timer(self, now: float) -> None:
        """Fail sends past their CTS deadline; ask again for CTSs that are late."""
        self.send.expire(now)
        for seq in self.send.cts_requests_due(now):
            self.counters.cts_requests_sent += 1
            self._actions.append(SendControl(encode_cts_request(seq)))

    # --- control path -----------------------------------------------------------------
    def receive_control(self, now: float, data: bytes) -> None:
        """A control message arrived. SDR's own are handled; others go to upper_control."""
        try:
            kind = message_type(data)
            if kind == CTS_TYPE:
                self.send.on_cts(decode_cts(data), now)
            elif kind == CTS_REQUEST_TYPE:
                self._resend_cts(decode_cts_request(data))
            elif kind in SDR_TYPES:
                raise RemoteProtocolError(f"unknown SDR control message type {kind}")
            elif len(self.upper_control) >= MAX_QUEUED_CONTROL:
                self.counters.control_dropped += 1  # nobody reads them: a flood, tail drop
            else:
                self.upper_control.append(data)
        except ProtocolError:
            self.counters.control_malformed += 1

    def _resend_cts(self, seq: int) -> None:
        for rec in self.recv.records():
            if rec.seq == seq:
                cts = CTS(rec.seq, rec.msg_id, rec.slot, rec.generation, rec.length)
                self._actions.append(SendControl(cts.encode()))
                self.counters.cts_resent += 1
                return  # not posted yet, or already over: nothing to answer

    def actions_to_do(self) -> list[Action]:
        """Drain the actions (bind, unbind, send control) the driver must carry out."""
        out = list(self._actions)
        self._actions.clear()
        return out

    def queue_control(self, data: bytes) -> None:
        """Let the layer above send a control message through the same action queue."""
        self._actions.append(SendControl(data))
