"""The sans-I/O SDR queue pair: send and receive tables behind one event interface.

Shape as in aioquic's connection: a driver feeds events with an explicit ``now``
(control messages, completion batches) and pulls work (packets to send, actions to carry
out). Nothing here touches a socket or a clock, so the same object runs over UDP, verbs,
offload workers and inside the simulator.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sdr.actions import Action, SendControl
from sdr.config import QPAttr
from sdr.control import CTS_TYPE, SDR_TYPES, decode_cts, message_type
from sdr.counters import QPCounters
from sdr.errors import ProtocolError
from sdr.recv_table import RecvRecord, RecvTable
from sdr.send_table import SendRecord, SendTable
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
        self, now: float, region: MemoryRegion, offset: int = 0, length: int | None = None
    ) -> RecvRecord:
        rec, actions = self.recv.post(region, offset, length)
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

    def receive_completions(self, now: float, batch: CompletionBatch) -> set[RecvRecord]:
        """Apply packet completions from the driver; returns the receives they touched."""
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
    ) -> SendRecord:
        """Queue a one-shot message; with ``cts_timeout`` it fails (sdr.TimeoutError) if
        no clear-to-send arrived by ``now + cts_timeout`` (checked on the ``now`` fed to
        :meth:`writes_to_send`)."""
        return self.send.post_send(region, offset, length, imm, now=now, cts_timeout=cts_timeout)

    def stream_start(
        self, now: float, imm: int | None = None, cts_timeout: float | None = None
    ) -> SendRecord:
        """Open a streaming send (no CTS deadline unless ``cts_timeout`` is given)."""
        return self.send.stream_start(imm, now=now, cts_timeout=cts_timeout)

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

    def writes_to_send(self, now: float, budget: int) -> list[WriteBatch]:
        """Packets to transmit now, at most ``budget`` (the driver's pacing allowance).

        Also fails the sends whose CTS deadline has passed at ``now`` (even with no budget).
        """
        return self.send.writes(budget, now)

    # --- control path -----------------------------------------------------------------
    def receive_control(self, now: float, data: bytes) -> None:
        """A control message arrived. SDR's own are handled; others go to upper_control."""
        try:
            kind = message_type(data)
            if kind == CTS_TYPE:
                self.send.on_cts(decode_cts(data))
            elif kind in SDR_TYPES:
                raise ProtocolError(f"unknown SDR control message type {kind}")
            elif len(self.upper_control) >= MAX_QUEUED_CONTROL:
                self.counters.control_dropped += 1  # nobody reads them: a flood, tail drop
            else:
                self.upper_control.append(data)
        except ProtocolError:
            self.counters.control_malformed += 1

    def actions_to_do(self) -> list[Action]:
        """Drain the actions (bind, unbind, send control) the driver must carry out."""
        out = list(self._actions)
        self._actions.clear()
        return out

    def queue_control(self, data: bytes) -> None:
        """Let the layer above send a control message through the same action queue."""
        self._actions.append(SendControl(data))
