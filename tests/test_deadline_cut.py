"""Where a deadline exchange cuts: from the later entry of the peers, dated by the first
clear-to-send of each (on a clock the test drives, so nothing here depends on timing)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sdr.backends.hierarchical import deadline_exchange
from sdr.backends.hierarchical.deadline_exchange import DeadlineExchange
from sdr.errors import TimeoutError

RTT, T = 0.025, 0.3


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def _cut(
    clears: dict[str, float],
    monkeypatch: pytest.MonkeyPatch,
    setup: float = 0.0,
    sleeps: bool = False,
    stops: list[float] | None = None,
) -> float:
    """When a call that started at 0 with deadline T stops, its writes to one peer cleared
    at the times in ``clears`` (and nothing else ends it). ``sleeps``: the driver looks at
    the condition only when something arrives (a clear-to-send) or its timeout comes, as
    a real one sleeping in select(); else every millisecond. ``stops``: gets the times
    the call stopped its writes."""
    clock = _Clock()
    monkeypatch.setattr(deadline_exchange, "time", clock)
    peer = SimpleNamespace(
        cleared=lambda h: clock.now >= clears[h],
        cleared_at=lambda h: clears[h] if clock.now >= clears[h] else None,
    )

    def drive(cond: object, timeout: float, what: str) -> None:
        end = clock.now + timeout
        for _ in range(10_000):
            if sleeps:
                arrivals = [t for t in clears.values() if t > clock.now]
                clock.now = min([end, *arrivals])
            else:
                clock.now += 0.001
            if cond():  # type: ignore[operator]
                return
            if sleeps and clock.now >= end:
                break
        raise TimeoutError(what)

    links = SimpleNamespace(rqps={1: peer}, config=SimpleNamespace(rtt=RTT), drive=drive)
    exchange = DeadlineExchange(links, me=0, datacenters=2)  # type: ignore[arg-type]
    probes = [(1, name) for name in clears]
    stop = None if stops is None else lambda: stops.append(clock.now)
    exchange._drive_until(lambda: False, T, T, probes, setup, stop)  # type: ignore[arg-type]
    return clock.now


def test_a_peer_in_the_call_from_the_start_cuts_at_the_deadline(monkeypatch) -> None:
    assert _cut({"a": 0.012, "b": 0.013}, monkeypatch) == pytest.approx(T, abs=0.002)


def test_a_late_peer_moves_the_cut_by_its_lateness(monkeypatch) -> None:
    # its first clear-to-send came at 0.1: it entered about half a round trip before
    assert _cut({"a": 0.1, "b": 0.101}, monkeypatch) == pytest.approx(0.1 - RTT / 2 + T, abs=0.002)


def test_a_lost_clear_to_send_does_not_move_the_cut(monkeypatch) -> None:
    # slice b's clear-to-send was lost and asked for again: it came an RTO later; the peer
    # was in the call from the start (slice a's came at once). Dating the entry by the
    # last one cut at 0.49 s.
    assert _cut({"a": 0.012, "b": 0.2}, monkeypatch) == pytest.approx(T, abs=0.002)


def test_the_peers_set_up_counts_as_long_as_ours(monkeypatch) -> None:
    # we took 4 ms from our entry to our clear-to-sends; the peer's code takes as long, so
    # its clear-to-send at 0.1 says it entered 4 ms before half a round trip before it
    late = 0.1 - RTT / 2 - 0.004 + T
    assert _cut({"a": 0.1}, monkeypatch, setup=0.004) == pytest.approx(late, abs=0.002)
    # never before our own deadline
    assert _cut({"a": 0.012}, monkeypatch, setup=0.004) == pytest.approx(T, abs=0.002)


def test_a_driver_that_sleeps_wakes_at_the_cut(monkeypatch) -> None:
    # nothing arrives after the clear-to-sends: the driver sleeps until its timeout.
    # Before, that timeout was the latest possible cut (the deadline twice over), so the
    # exchange ran up to a whole deadline past the cut (5-75 ms past it on the WAN)
    assert _cut({"a": 0.012}, monkeypatch, sleeps=True) == pytest.approx(T, abs=1e-9)
    late = 0.1 - RTT / 2 + T  # the cut moved later while it slept: it wakes there
    assert _cut({"a": 0.1}, monkeypatch, sleeps=True) == pytest.approx(late, abs=1e-9)


def test_writes_stop_half_a_round_trip_before_the_cut(monkeypatch) -> None:
    # what leaves after cut - RTT/2 reaches the peer after its cut (it cuts when we do):
    # it cannot count, and it would reach the peer ahead of our note. Before, the writes
    # ran to the cut, and the note waited behind them (1 ms at the median, 2 at p90)
    for sleeps in (False, True):
        stops: list[float] = []
        cut = _cut({"a": 0.012}, monkeypatch, sleeps=sleeps, stops=stops)
        assert cut == pytest.approx(T, abs=0.002)
        assert stops == [pytest.approx(T - RTT / 2, abs=0.002 if not sleeps else 1e-9)]


def test_writes_stop_only_once_the_cut_cannot_move_earlier(monkeypatch) -> None:
    # the peer's clear-to-send comes after our own stop time would have been: its entry
    # moves the cut later, and the writes stop half a round trip before that cut, not ours
    for sleeps in (False, True):
        stops: list[float] = []
        came = T - RTT / 2 + 0.005
        cut = _cut({"a": came}, monkeypatch, sleeps=sleeps, stops=stops)
        assert cut == pytest.approx(came - RTT / 2 + T, abs=0.002)
        assert stops == [pytest.approx(cut - RTT / 2, abs=0.002 if not sleeps else 1e-9)]
    # nobody came: nothing of ours left (no clear-to-send), nothing to stop
    stops = []
    assert _cut({"a": 10.0}, monkeypatch, stops=stops) == pytest.approx(T, abs=0.002)
    assert stops == []


def test_the_entry_is_dated_by_when_the_clear_to_send_came_not_when_we_looked(
    monkeypatch,
) -> None:
    # a busy host looks every 30 ms: the clear-to-send that came at 0.1 is seen at 0.12.
    # Before, the peer's entry was dated from the look (the cut 20 ms late, and the peer
    # waited for our note that much longer); now from the round that brought it
    clock = _Clock()
    monkeypatch.setattr(deadline_exchange, "time", clock)
    came = 0.1
    peer = SimpleNamespace(
        cleared=lambda h: clock.now >= came,
        cleared_at=lambda h: came if clock.now >= came else None,
    )

    def drive(cond: object, timeout: float, what: str) -> None:
        end = clock.now + timeout
        while clock.now < end:
            clock.now = min(clock.now + 0.03, end)
            if cond():  # type: ignore[operator]
                return
        raise TimeoutError(what)

    links = SimpleNamespace(rqps={1: peer}, config=SimpleNamespace(rtt=RTT), drive=drive)
    exchange = DeadlineExchange(links, me=0, datacenters=2)  # type: ignore[arg-type]
    entered, cut, heard = exchange._drive_until(lambda: False, T, T, [(1, "a")])  # type: ignore[arg-type]
    assert entered == pytest.approx(came - RTT / 2)
    assert cut == pytest.approx(came - RTT / 2 + T)
    assert heard == {1}


def test_a_note_that_cannot_leave_is_not_waited_for() -> None:
    # a rank that decided alone (no clear-to-send from the peer: a dark link, a slow
    # site) has notes that cannot leave; before, it waited out the 100 ms bound for them
    # (a blackout step took 217 ms against a 108 ms deadline)
    calls: list[str] = []
    rqp = SimpleNamespace(
        sent=lambda h: False, cleared=lambda h: False, flush=lambda: calls.append("flush")
    )
    waited: list[bool] = []

    def drive(cond: object, timeout: float, what: str) -> None:
        calls.append("drive")
        waited.append(not cond())  # type: ignore[operator]

    links = SimpleNamespace(rqps={1: rqp}, config=SimpleNamespace(rtt=RTT), drive=drive)
    exchange = DeadlineExchange(links, me=0, datacenters=2)  # type: ignore[arg-type]
    exchange._send_notes([SimpleNamespace(rqp=rqp)])  # type: ignore[list-item]
    assert waited == [False]
    rqp.cleared = lambda h: True  # cleared but not out yet: that one is waited for
    exchange._send_notes([SimpleNamespace(rqp=rqp)])  # type: ignore[list-item]
    assert waited == [False, True]
    # each time the note's QP sent before any round read what arrived
    assert calls == ["flush", "drive", "flush", "drive"]


class _Posting:
    """A peer QP that records what open() does, on a clock each post advances."""

    def __init__(self, clock: _Clock, post_s: float) -> None:
        self.clock, self.post_s, self.log = clock, post_s, []

    def post_recv(self, mr: object, offset: int, length: int) -> str:
        self.clock.now += self.post_s
        self.log.append("post")
        return "recv"

    def progress(self) -> int:
        self.log.append("progress")
        return 0


def _opener(monkeypatch: pytest.MonkeyPatch) -> tuple[DeadlineExchange, _Clock, _Posting]:
    from contextlib import nullcontext

    clock = _Clock()
    monkeypatch.setattr(deadline_exchange, "time", clock)
    peer = _Posting(clock, 0.0001)
    links = SimpleNamespace(
        rqps={1: peer},
        ctx=SimpleNamespace(register=lambda buf: buf),
        exclusive=nullcontext,
        options=SimpleNamespace(attr=lambda: SimpleNamespace(max_message_size=1 << 20)),
        config=SimpleNamespace(max_in_flight=32, rtt=RTT),
    )
    return DeadlineExchange(links, me=0, datacenters=2), clock, peer  # type: ignore[arg-type]


def test_open_sends_its_clear_to_sends_before_it_returns(monkeypatch) -> None:
    # posted receives' clear-to-sends leave at the next progress round; before, that was
    # whichever thread came first after the carry and the local reduction (0-3 ms more,
    # not in the set-up the peer subtracts, so it dated our entry that much late)
    exchange, _, peer = _opener(monkeypatch)
    exchange.open(1000, np.float32, 4, begun=0.0)
    assert peer.log == ["post"] * 5 + ["progress"]  # four slices and the note, then out


def test_a_preempted_set_up_of_ours_does_not_date_the_peer(monkeypatch) -> None:
    # the peer's entry is its first clear-to-send less half an RTT and its set-up, taken
    # to be ours; one set-up of ours 10 ms long (the host ran something else) says
    # nothing about the peer's: the median of our recent ones stands for it
    exchange, clock, peer = _opener(monkeypatch)
    for _ in range(5):
        opened = exchange.open(1000, np.float32, 4, begun=clock.now)
    assert opened.typical_setup == pytest.approx(0.0005)
    peer.post_s = 0.002  # five posts: 10 ms
    opened = exchange.open(1000, np.float32, 4, begun=clock.now)
    assert opened.setup == pytest.approx(0.010)
    assert opened.typical_setup == pytest.approx(0.0005)
