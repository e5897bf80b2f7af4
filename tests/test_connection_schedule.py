"""A round runs the machines an event reached or whose timer is due, nothing else
(sdr.reliability.schedule): the same protocol as asking every machine every round, at a
cost that does not grow with the messages in flight."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_reliable_connection import Side, Wire, _payload, _register

from sdr.reliability import ReceiveCompleted, WriteCompleted
from sdr.reliability.schedule import Schedule


class _Machine:
    def __init__(self, timer: float | None, work: bool = False) -> None:
        self.timer, self.work, self.asked = timer, work, 0

    def next_timer(self) -> float | None:
        self.asked += 1
        return self.timer

    def has_work(self) -> bool:
        return self.work


def test_due_is_touched_or_timed_in_sequence_order_and_clears_the_touched() -> None:
    s = Schedule()
    s.ran(3, _Machine(5.0))
    s.ran(1, _Machine(None))
    s.touch(2)
    assert s.due(4.0) == [2]  # 3 waits for 5.0, 1 has no timer
    assert s.due(4.0) == []  # touched once, run once
    assert s.due(5.0) == [3]
    s.touch(1)
    s.forget(3)
    assert s.due(9.0) == [1]


def test_a_machine_with_work_runs_again_next_round() -> None:
    s = Schedule()
    busy = _Machine(None, work=True)
    s.ran(0, busy)
    assert s.due(0.0) == [0]
    busy.work = False
    s.ran(0, busy)
    assert s.due(0.0) == []


def test_touch_all_runs_every_machine_known() -> None:
    s = Schedule()
    for seq in range(4):
        s.ran(seq, _Machine(100.0))
    s.touch_all()
    assert s.due(0.0) == [0, 1, 2, 3]


def test_next_timer_asks_the_touched_machines_again() -> None:
    s = Schedule()
    machines = {0: _Machine(10.0), 1: _Machine(None)}
    for seq, m in machines.items():
        s.ran(seq, m)
    assert s.next_timer(machines.get) == 10.0
    machines[1].timer = 2.0  # an event made it earlier; the owner touched it
    s.touch(1)
    assert s.next_timer(machines.get) == 2.0
    s.touch(7)  # over already: machine_of says None
    assert s.next_timer(machines.get) == 2.0
    assert Schedule().next_timer(machines.get) is None


def test_idle_receives_are_not_asked_each_round() -> None:
    """Twelve receives posted, one message sent: the eleven that nothing reached are
    asked for their timer a bounded number of times, not twice every round."""
    a, b = Side("sr-nack"), Side("sr-nack")
    wire = Wire(a, b, loss=0.05, seed=3)
    dsts = [np.zeros(200_000, dtype=np.uint8) for _ in range(12)]
    for d in dsts:
        b.conn.post_recv(wire.now, _register(d))
    src = _payload(200_000, seed=5)
    a.conn.post_write(wire.now, _register(src))
    asked = {}
    for inc in b.conn.receives.receiving.values():
        machine, original = inc.machine, inc.machine.next_timer
        asked[inc.seq] = [0]

        def counted(original=original, box=asked[inc.seq]) -> float | None:
            box[0] += 1
            return original()

        machine.next_timer = counted  # type: ignore[method-assign]
    rounds = [0]

    def done() -> bool:
        rounds[0] += 1
        return any(isinstance(e, ReceiveCompleted) for e in b.events())

    wire.run(done)
    assert np.array_equal(dsts[0], src)
    assert rounds[0] > 50  # enough rounds that a per-round cost would show
    assert asked[0][0] > 10  # the receive that moved was asked as it moved
    assert max(asked[seq][0] for seq in range(1, 12)) <= 3


def _trace(scheme: str, loss: float, every_round: bool, monkeypatch: pytest.MonkeyPatch):
    """Every control message either side sent, with the round it left in, and the
    events; ``every_round`` asks every machine every round (what the schedule saves)."""
    with monkeypatch.context() as m:
        if every_round:

            def due(self: Schedule, now: float) -> list[int]:
                run = set(self._timers) | self._touched
                self._touched = set()
                return sorted(run)

            def next_timer(self: Schedule, machine_of) -> float | None:
                times = [machine_of(seq) for seq in set(self._timers) | self._touched]
                finite = [t for mc in times if mc is not None and (t := mc.next_timer())]
                finite = [t for t in finite if math.isfinite(t)]
                return min(finite) if finite else None

            m.setattr(Schedule, "due", due)
            m.setattr(Schedule, "next_timer", next_timer)
        a, b = Side(scheme), Side(scheme)
        wire = Wire(a, b, loss=loss, seed=11)
        sent: list[tuple[int, bytes]] = []

        def spy(data: bytes, index: int) -> bool:
            sent.append((round(wire.now * 1e4), bytes(data)))
            return False  # none dropped

        wire.drop_control = spy
        srcs = [_payload(n, seed=n) for n in (150_000, 90_000, 4096, 60_000)]
        dsts = [np.zeros_like(s) for s in srcs]
        for d in dsts:
            b.conn.post_recv(wire.now, _register(d))
        for s in srcs:
            a.conn.post_write(wire.now, _register(s))
        events: list[object] = []

        def done() -> bool:
            events.extend(a.events() + b.events())
            return len(events) == 8

        wire.run(done)
        assert all(np.array_equal(s, d) for s, d in zip(srcs, dsts, strict=True))
        kinds = sorted(type(e).__name__ for e in events)
        assert kinds == sorted([ReceiveCompleted.__name__] * 4 + [WriteCompleted.__name__] * 4)
        return sent, [(type(e).__name__, e.seq) for e in events]


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack", "ec-mds"])
def test_the_schedule_changes_no_message_and_no_round(scheme, monkeypatch) -> None:
    """Differential: the same wire with every machine asked every round sends the same
    control messages in the same rounds and finishes the same messages in the same
    order."""
    fast = _trace(scheme, 0.05, False, monkeypatch)
    slow = _trace(scheme, 0.05, True, monkeypatch)
    assert len(fast[0]) > 10
    assert fast == slow
