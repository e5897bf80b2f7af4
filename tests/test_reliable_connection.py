"""The sans-I/O ReliableConnection, driven by hand: no Context, no transport, no clock.

A few lines below play the NIC (a key table per side, the core's placement step) and the
wire (drop what a seeded generator says); the test feeds ``now`` itself. This is what a
driver (udp, offload, the simulator) does, and what a native driver will do.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

import sdr
from sdr.actions import Bind, Reopen, Seal, SendControl, Unbind
from sdr.control import CTS_TYPE
from sdr.key_table import KeyTable
from sdr.placement import PLACED
from sdr.reliability import (
    MessageFailedEvent,
    ReceiveCompleted,
    ReliabilityConfig,
    ReliableConnection,
    WriteCompleted,
)
from sdr.transport import CompletionBatch, MemoryRegion, as_byte_view

ATTR = sdr.QPAttr(mtu=1024, chunk_size=4096, max_message_size=1 << 20)
_keys = itertools.count(1)


def _register(buffer: object) -> MemoryRegion:
    return MemoryRegion(key=next(_keys), view=as_byte_view(buffer))


class Side:
    """One end: its connection and the key table its 'NIC' places packets through."""

    def __init__(self, scheme: str, attr: sdr.QPAttr = ATTR, **overrides: object) -> None:
        config = ReliabilityConfig.coerce(scheme, **{"rtt": 0.01, **overrides}).resolved(
            attr.chunk_size, 1e9
        )
        self.conn = ReliableConnection(sdr.QueuePairCore(attr), config, _register)
        self.keys = KeyTable(attr)
        self.outbox: list[bytes] = []

    def carry_out(self) -> None:
        for a in self.conn.actions_to_do():
            if isinstance(a, Bind):
                self.keys.bind(a)
            elif isinstance(a, Unbind):
                self.keys.unbind(a.generation, a.slot)
            elif isinstance(a, Seal):
                self.keys.seal(a.generation, a.slot, a.start, a.stop)
            elif isinstance(a, Reopen):
                self.keys.reopen(a.generation, a.slot, a.start, a.stop)
            elif isinstance(a, SendControl):
                self.outbox.append(a.data)

    def events(self) -> list[object]:
        out = []
        while (event := self.conn.next_event()) is not None:
            out.append(event)
        return out


class Wire:
    """Two sides, a loss rate for data packets, a rule for control messages."""

    def __init__(
        self,
        a: Side,
        b: Side,
        loss: float = 0.0,
        drop_control=None,
        seed: int = 1,
        control_delay: float = 0.0,
    ):
        self.sides = (a, b)
        self.loss = loss
        self.drop_control = drop_control or (lambda data, index: False)
        self.control_delay = control_delay
        """Seconds a control message takes (0: within the round it was sent)."""
        self._late: list[tuple[float, Side, bytes]] = []
        self.rng = np.random.default_rng(seed)
        self.controls = 0
        self.dropped = 0
        self.now = 0.0

    def round(self) -> None:
        due = [m for m in self._late if m[0] <= self.now]
        self._late = [m for m in self._late if m[0] > self.now]
        for _, side, data in due:
            side.conn.receive_control(self.now, data)
        for me, peer in (self.sides, self.sides[::-1]):
            for batch in me.conn.writes_to_send(self.now, 64):
                keep = self.rng.random(len(batch)) >= self.loss_of(batch)
                self.dropped += int((~keep).sum())
                payloads = [
                    batch.region.view[int(s) : int(s) + int(n)]
                    for s, n in zip(batch.src_offsets, batch.lengths, strict=True)
                ]
                n = len(batch)
                verdicts = peer.keys.place(
                    np.full(n, batch.generation, dtype=np.int64)[keep],
                    batch.remote_offsets[keep],
                    batch.imms[keep],
                    batch.lengths[keep],
                    [p for p, k in zip(payloads, keep, strict=True) if k],
                )
                placed = verdicts == PLACED
                peer.conn.receive_completions(
                    self.now,
                    CompletionBatch(
                        channels=batch.channels[keep][placed],
                        generations=np.full(int(placed.sum()), batch.generation, np.uint8),
                        imms=batch.imms[keep][placed],
                        byte_lens=batch.lengths[keep][placed],
                        remote_offsets=batch.remote_offsets[keep][placed],
                        validated=True,
                    ),
                )
            me.carry_out()
            for data in me.outbox:
                if self.drop_control(data, self.controls):
                    pass
                elif self.control_delay:
                    self._late.append((self.now + self.control_delay, peer, data))
                else:
                    peer.conn.receive_control(self.now, data)
                self.controls += 1
            me.outbox.clear()
            me.carry_out()
        self.now += 1e-4
        for side in self.sides:
            deadline = side.conn.get_timer()
            if deadline is not None and deadline <= self.now:
                side.conn.handle_timer(self.now)

    def loss_of(self, batch) -> float | np.ndarray:
        """The drop probability of each packet of ``batch`` (a subclass may vary it)."""
        return self.loss

    def run(self, until, rounds: int = 200_000) -> None:
        for _ in range(rounds):
            if until():
                return
            self.round()
        raise AssertionError("did not finish")


def _payload(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.fixture
def no_clock(monkeypatch):
    """Any clock read inside the protocol fails the test: time comes only as ``now``."""

    def refuse(*_args: object) -> float:
        raise AssertionError("the sans-I/O connection read a clock")

    for name in ("monotonic", "perf_counter", "time", "monotonic_ns", "time_ns"):
        monkeypatch.setattr(time, name, refuse)


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack", "ec-mds", "ec-xor"])
@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_writes_complete_with_the_senders_bytes_and_events(scheme, loss, no_clock) -> None:
    a, b = Side(scheme), Side(scheme)
    wire = Wire(a, b, loss=loss, seed=7)
    srcs = [_payload(n, seed=n) for n in (100_000, 4096, 1)]
    dsts = [np.zeros_like(s) for s in srcs]
    recv_seqs = [b.conn.post_recv(wire.now, _register(d)) for d in dsts]
    write_seqs = [a.conn.post_write(wire.now, _register(s)) for s in srcs]
    assert recv_seqs == write_seqs == [0, 1, 2]
    got_a, got_b = [], []

    def done() -> bool:
        got_a.extend(a.events())
        got_b.extend(b.events())
        return len(got_a) == 3 and len(got_b) == 3

    wire.run(done)
    assert [type(e) for e in got_a] == [WriteCompleted] * 3
    assert [type(e) for e in got_b] == [ReceiveCompleted] * 3
    assert sorted(e.seq for e in got_b) == [0, 1, 2]
    for src, dst in zip(srcs, dsts, strict=True):
        assert np.array_equal(src, dst)
    assert (wire.dropped > 0) == (loss > 0)  # and still every byte right


def test_a_lost_cts_is_the_cores_business(no_clock) -> None:
    a, b = Side("sr-rto"), Side("sr-rto")
    wire = Wire(a, b, drop_control=lambda data, index: data[0] == CTS_TYPE and index == 0)
    src, dst = _payload(50_000, seed=3), np.zeros(50_000, dtype=np.uint8)
    b.conn.post_recv(wire.now, _register(dst))
    a.conn.post_write(wire.now, _register(src))
    events: list[object] = []
    wire.run(lambda: events.extend(b.events()) or bool(events))
    assert isinstance(events[0], ReceiveCompleted) and np.array_equal(src, dst)
    assert a.conn.core.counters.cts_requests_sent >= 1
    assert b.conn.core.counters.cts_resent >= 1


def test_a_receive_of_the_wrong_length_fails_both_ends_with_events() -> None:
    a, b = Side("sr-rto"), Side("sr-rto")
    wire = Wire(a, b)
    b.conn.post_recv(wire.now, _register(np.zeros(1000, dtype=np.uint8)))
    a.conn.post_write(wire.now, _register(_payload(2000, seed=1)))
    got: list[object] = []
    wire.run(lambda: got.extend(a.events() + b.events()) or len(got) == 2)
    assert all(isinstance(e, MessageFailedEvent) for e in got)
    assert {e.kind for e in got} == {"write", "receive"}
    assert "expected 2000" in str(next(e for e in got if e.kind == "write").error)


def test_timers_are_only_what_get_timer_says() -> None:
    a = Side("sr-rto")
    assert a.conn.get_timer() is None  # idle: nothing to wait for
    a.conn.post_write(0.0, _register(_payload(4096, seed=2)))
    deadline = a.conn.get_timer()
    assert deadline is not None and deadline > 0.0  # the CTS request, the start deadline
    a.conn.handle_timer(deadline)
    a.carry_out()
    assert a.outbox  # a CTS request went out at that deadline


def test_has_left_says_when_a_writes_first_copies_are_out_and_stays_true_after() -> None:
    # a caller about to stop progressing (a deadline allreduce's decided rank) drives
    # until its note has left; the write may finish before its handle hears of it, and
    # a finished write counts as out (before, it read as not sent)
    a, b = Side("sr-nack"), Side("sr-nack")
    wire = Wire(a, b)
    src = _payload(3 * 4096, seed=1)
    seq = a.conn.post_write(0.0, _register(src))
    for _ in range(3):
        wire.round()
    assert not a.conn.has_left(seq)  # no receive posted: no clear-to-send, nothing out
    dst = np.zeros_like(src)
    b.conn.post_recv(wire.now, _register(dst))
    done: list[object] = []
    left_early = False
    while not done:
        wire.round()
        left_early = left_early or (a.conn.has_left(seq) and seq in a.conn.writes.sending)
        done.extend(a.events())
    assert left_early  # out, and still in flight (not acknowledged yet)
    assert isinstance(done[0], WriteCompleted) and np.array_equal(src, dst)
    assert a.conn.has_left(seq)  # over: still true
    assert not a.conn.has_left(seq + 1)  # never posted
