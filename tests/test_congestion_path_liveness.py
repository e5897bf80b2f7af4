"""The path selector's liveness: a path that stops acknowledging is declared dead, gets
only probes (never a repair), and comes back with its first ACK; a quiet link as a whole
kills no path. Hand-fed events, no clock.

Before, the only rule was PLB's comparison against the lower median path: with three of
four paths black-holed the median path is a dead one, nothing looked worse than it, and
three quarters of every chunk's (re)transmissions kept going into the holes.
"""

from __future__ import annotations

import pytest

from sdr.congestion import PathSelector
from sdr.errors import ConfigError

RTT = 0.01
RTO = 0.03
CHUNK = 65536


def _traffic(
    sel: PathSelector, t0: float, t1: float, alive: set[int], quiet: frozenset[int] = frozenset()
) -> float:
    """Chunks every RTT/10 on each path but the ``quiet`` ones from t0 to t1: acked on
    ``alive`` paths one RTT later, declared lost one RTO later on the others (an RTO
    sender's verdicts)."""
    t = t0
    while t < t1:
        for p in range(len(sel.stats)):
            if not sel.stats[p].alive or p in quiet:
                continue
            sel.on_sent(t, p, CHUNK)
            if p in alive:
                sel.on_ack(t + RTT, p, CHUNK, RTT)
            else:
                sel.on_loss(t + RTO, p, CHUNK)
        t += RTT / 10
    return t


def test_three_black_holes_of_four_are_declared_dead_and_get_nothing() -> None:
    sel = PathSelector(4, rto=RTO)
    t = _traffic(sel, 0.0, 0.1, {0, 1, 2, 3})
    t = _traffic(sel, t, 0.3, {0})
    assert sel.alive == [0]
    assert [p for _, p, alive in sel.liveness] == [1, 2, 3]
    assert all(not alive for _, _, alive in sel.liveness)
    died = max(when for when, _, _ in sel.liveness)
    assert died < 0.1 + RTO + 3 * RTO  # the last loss verdicts, plus dead_rtos RTOs
    assert sel.weights == [1.0, 0.0, 0.0, 0.0]
    # repairs (probe=False) and picks without a clock never go to a dead path
    assert {sel.pick(t + 1.0, probe=False) for _ in range(100)} == {0}
    assert {sel.pick() for _ in range(100)} == {0}


def test_a_dead_path_is_probed_with_backoff_and_comes_back_with_its_first_ack() -> None:
    sel = PathSelector(2, rto=RTO)
    t = _traffic(sel, 0.0, 0.1, {0, 1})
    t = _traffic(sel, t, 0.3, {0})
    [(died, path, _)] = sel.liveness
    assert path == 1
    picks = []
    now = died
    while now < died + 40 * RTO:  # a chunk's first transmission every RTT/10
        picks.append((now, sel.pick(now, probe=True)))
        now += RTT / 10
    probes = [when - died for when, p in picks if p == 1]
    assert probes[0] == pytest.approx(RTO, abs=RTT / 10)  # one RTO, then 2, 4, 8 ...
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert gaps == pytest.approx([2 * RTO, 4 * RTO, 8 * RTO, 16 * RTO][: len(gaps)], abs=RTT)
    sel.on_ack(now, 1, CHUNK, RTT)  # a probe got through
    assert sel.alive == [0, 1] and sel.liveness[-1][1:] == (1, True)
    assert sel.weights[1] > 0  # a trickle (PLB moved it off while it lost) or a half


def test_a_link_that_goes_quiet_as_a_whole_kills_no_path() -> None:
    # an outage of every path (or a descheduled host): every path's ACKs stop together
    sel = PathSelector(4, rto=RTO)
    t = _traffic(sel, 0.0, 0.1, {0, 1, 2, 3})
    t = _traffic(sel, t, 0.5, set())
    assert sel.liveness == [] and sel.alive == [0, 1, 2, 3]
    _traffic(sel, t, t + 0.1, {0, 1, 2, 3})
    assert sel.alive == [0, 1, 2, 3]


def test_a_path_back_from_the_dead_returns_on_a_trickle_then_earns_its_share() -> None:
    # Before, a probe's ACK gave a dead path its full share at once: a lossy path that
    # answered a probe now and then swung between dead and a third of the traffic (a
    # 3-path transfer over TUN sent half as much on its 5 %-loss path as on a good one)
    sel = PathSelector(3, rto=RTO)
    t = _traffic(sel, 0.0, 0.1, {0, 1, 2})
    t = _traffic(sel, t, t + 3 * RTO, {0, 1}, quiet=frozenset({2}))  # no ACK, no verdict
    sel.on_loss(t, 2, CHUNK)
    sel.on_loss(t, 2, CHUNK)  # then its chunks' verdicts: dead before any round saw them
    assert sel.alive == [0, 1] and sel.moves[-1][1:] == (2, False)  # dead is moved off
    sel.on_ack(t, 2, CHUNK, RTT)  # a probe got through
    assert sel.alive == [0, 1, 2]
    assert sel.weights[2] == pytest.approx(sel.probe_weight / (2 + sel.probe_weight))
    t = _traffic(sel, t, t + sel.good_rounds * RTT, {0, 1, 2})
    assert sel.moves[-1][1:] == (2, False)  # not yet: the hysteresis
    # back once its loss EWMA has decayed (from a whole round lost) and good_rounds passed
    _traffic(sel, t, t + 100 * RTT, {0, 1, 2})
    assert sel.moves[-1][1:] == (2, True)
    assert sel.weights == pytest.approx([1 / 3] * 3)


def test_random_loss_on_a_busy_path_is_not_death() -> None:
    sel = PathSelector(2, rto=RTO)
    t = 0.0
    for k in range(3000):  # path 1 loses every 10th chunk, the others are acked
        for p in (0, 1):
            sel.on_sent(t, p, CHUNK)
            if p == 1 and k % 10 == 0:
                sel.on_loss(t + RTO, p, CHUNK)
            else:
                sel.on_ack(t + RTT, p, CHUNK, RTT)
        t += RTT / 10
    assert sel.liveness == []


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"rto": 0}, "rto must be a positive number of seconds or None"),
        ({"dead_rtos": -1}, "dead_rtos must be a positive number"),
        ({"dead_losses": 0}, "dead_losses must be an integer >= 1"),
        ({"probe_rtos": 4.0, "probe_max_rtos": 2.0}, "probe_max_rtos must be >= probe_rtos"),
    ],
)
def test_bad_liveness_parameters_are_one_line_errors(kwargs, words) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        PathSelector(4, **kwargs)
    assert "\n" not in str(info.value)
