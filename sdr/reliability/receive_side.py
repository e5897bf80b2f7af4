"""The receive side of a reliable connection: its posted receives and their machines.

A :class:`ReceiveSide` holds the reliable receives of one
:class:`~sdr.reliability.connection.ReliableConnection`: those waiting for room in the
core's receive table (posted in order: the n-th receive matches the peer's n-th write),
the receiver machine of each posted one, which lane of which receive every SDR receive
record is (so arrivals reach the right machine), the :class:`~sdr.reliability.schedule.
Schedule` of those machines, and the outcome of the last finished ones (to answer a late
PROBE). The connection hands it arrivals and control messages and runs it once per round;
it sends control messages and reports each receive's end through the callables it got.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable

import numpy as np

from sdr.errors import Cancelled, ConfigError, ResourceBusy, SDRError
from sdr.queue_pair import QueuePairCore
from sdr.recv_table import RecvRecord
from sdr.reliability.base import Finished, Machine, ReopenChunks, Scheme, SealChunks, SendMessage
from sdr.reliability.machine_round import run_machine
from sdr.reliability.messages import Ack, ControlMessage, Probe
from sdr.reliability.schedule import Schedule
from sdr.reliability.stall_hold import StallHold
from sdr.reliability.transfers import Incoming, Register
from sdr.transport import MemoryRegion

__all__ = ["ReceiveSide"]


class ReceiveSide:
    """The reliable receives of one connection (sans-I/O: every call takes ``now``).

    ``send`` queues a control message to the peer; ``over`` hears of each receive's end
    (its seq, length, error or None, and its machine's stats); the outcomes of the last
    ``finished_memory`` receives are kept for late PROBEs.
    """

    def __init__(
        self,
        core: QueuePairCore,
        scheme: Scheme,
        register: Register,
        send: Callable[[ControlMessage], None],
        over: Callable[[int, int, SDRError | None, dict[str, int]], None],
        finished_memory: int,
    ) -> None:
        self.core = core
        self.scheme = scheme
        self._register = register
        self._send = send
        self._over = over
        self._finished_memory = finished_memory
        self._next_seq = 0
        self.to_post: deque[Incoming] = deque()
        """Receives not fully posted yet (the receive table was full), in order."""
        self.receiving: dict[int, Incoming] = {}
        """Receives not finished, by sequence number."""
        self.finished: OrderedDict[int, bool] = OrderedDict()
        """The last finished receives: completed (True) or failed."""
        self._schedule = Schedule()
        self._stall = StallHold()
        self._lane_in: dict[RecvRecord, tuple[Incoming, int]] = {}

    def post(self, now: float, region: MemoryRegion, offset: int, length: int) -> int:
        """Queue a receive into region[offset:offset+length] (range checked); its seq."""
        seq = self._next_seq
        self._next_seq += 1
        inc = Incoming(seq, region, offset, length, self.scheme.lanes(length))
        self.to_post.append(inc)
        self.receiving[seq] = inc
        self.post_waiting(now)
        return seq

    def cancel(self, now: float, seq: int) -> bool:
        """Cancel receive ``seq`` (see :meth:`ReliableConnection.cancel_recv`)."""
        inc = self.receiving.get(seq)
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
        self._end(now, inc, Cancelled(f"receive seq {seq} cancelled"))
        return True

    def on_arrivals(
        self, now: float, arrivals: dict[RecvRecord, np.ndarray], stall_timeout: float
    ) -> bool:
        """Newly complete chunks per receive record (the core's report) reach their
        machines; True if any receive moved (then none is stuck: every receive's
        deadline is held ``stall_timeout`` from now)."""
        progress = False
        for rec, chunks in arrivals.items():
            owner = self._lane_in.get(rec)
            if owner is not None and len(chunks):
                inc, lane = owner
                if inc.machine is not None and inc.machine.active:
                    self._schedule.touch(inc.seq)
                    inc.chunks_in += len(chunks)
                    inc.machine.on_chunks(now, lane, chunks)
                    progress = True
        until = self._stall.push(now, stall_timeout) if progress else None
        if until is not None:
            for other in self.receiving.values():
                if other.machine is not None:
                    other.machine.hold_deadline(until)
        return progress

    def on_control(self, now: float, msg: ControlMessage) -> bool:
        """A control message for a receive (not ``TO_SENDER``); False if it was stale."""
        inc = self.receiving.get(msg.seq)
        if inc is not None and inc.machine is not None:
            self._schedule.touch(msg.seq)
            inc.machine.on_control(now, msg)
        elif isinstance(msg, Probe) and msg.seq in self.finished:
            self._send(Ack(msg.seq, failed=not self.finished[msg.seq]))
        else:
            return False
        return True

    def least_to_come(self) -> int | None:
        """Bytes that must still arrive before the first of the posted receives can
        complete, at least (:meth:`Incoming.least_to_come`); None when none is posted."""
        least = None
        for inc in self.receiving.values():
            if inc.machine is not None and inc.machine.active:
                left = inc.least_to_come(self.scheme.chunk_size)
                least = left if least is None else min(least, left)
        return least

    def gapped(self) -> bool:
        """Some posted receive has a hole (:attr:`SchemeReceiver.gapped`)."""
        return any(
            inc.machine is not None and inc.machine.active and inc.machine.gapped
            for inc in self.receiving.values()
        )

    def next_timer(self) -> float | None:
        """The earliest deadline of any receive's machine."""
        return self._schedule.next_timer(self._machine)

    def post_waiting(self, now: float) -> None:
        """Post what fits of the receives waiting for room in the receive table."""
        recv_table = self.core.recv
        while self.to_post:
            inc = self.to_post[0]
            if inc.machine is None and not inc.over:
                if recv_table.active + len(inc.lengths) > self.core.attr.max_messages:
                    return
                inc.prepare(self.scheme, self._register)
                self._schedule.touch(inc.seq)
            while not inc.fully_posted:
                region, base = inc.lane_regions[len(inc.posted)]
                length = inc.lengths[len(inc.posted)]
                # a one-chunk message goes out small_copies times; its CTS too, or one
                # lost CTS holds it back an RTO (the sender's CTS request)
                tiny = length <= self.core.attr.chunk_size
                copies = self.scheme.config.small_copies if tiny else 1
                try:
                    rec = self.core.post_recv(now, region, base, length, copies)
                except ResourceBusy:
                    return
                lane = len(inc.posted)
                self._lane_in[rec] = (inc, lane)
                inc.posted.append(rec)
                if inc.machine is not None and rec.bitmap.chunk_size == self.scheme.chunk_size:
                    inc.machine.use_packet_sums(lane, rec.bitmap.chunk_sums)
                if inc.over:
                    self._release(now, rec)
            self.to_post.popleft()

    def run_due(self, now: float) -> None:
        """Run the machines an event reached or whose timer is due; carry out their actions."""
        for seq in self._schedule.due(now):
            inc = self.receiving.get(seq)
            if inc is not None and inc.machine is not None:
                run_machine(now, inc.machine)
                self._carry_out(now, inc)
                if seq in self.receiving:
                    self._schedule.ran(seq, inc.machine)

    def _machine(self, seq: int) -> Machine | None:
        inc = self.receiving.get(seq)
        return None if inc is None else inc.machine

    def _release(self, now: float, rec: RecvRecord) -> None:
        self._lane_in.pop(rec, None)
        self.core.complete_recv(now, rec)  # unbind: late packets are discarded from now on

    def _carry_out(self, now: float, inc: Incoming) -> None:
        assert inc.machine is not None
        for action in inc.machine.actions():
            if isinstance(action, SendMessage):
                self._send(action.message)
            elif isinstance(action, SealChunks | ReopenChunks):
                inc.guard(self.core, now, action)
            elif isinstance(action, Finished):
                self._end(now, inc, action.error)

    def _end(self, now: float, inc: Incoming, error: SDRError | None) -> None:
        if self.receiving.pop(inc.seq, None) is None:
            return
        self._schedule.forget(inc.seq)
        inc.over = True
        for rec in inc.posted:
            self._release(now, rec)
        self.finished[inc.seq] = error is None
        while len(self.finished) > self._finished_memory:
            self.finished.popitem(last=False)
        assert inc.machine is not None
        self._over(inc.seq, inc.length, error, inc.machine.stats)
