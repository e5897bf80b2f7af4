"""The multipath selector: moves off a worse path after a few rounds, back with hysteresis."""

from __future__ import annotations

import pytest

from sdr.congestion import PathSelector
from sdr.errors import ConfigError

RTT = 0.025


def _round(sel: PathSelector, t: float, rtts: list[float], loss: list[float]) -> float:
    """One round of 100 packets per path with the given RTTs and loss fractions."""
    for k in range(100):
        now = t + RTT * k / 100
        for p, (rtt, lf) in enumerate(zip(rtts, loss, strict=True)):
            if k < lf * 100:
                sel.on_loss(now, p, 4096)
            else:
                sel.on_ack(now, p, 4096, rtt)
    return t + RTT * 1.01


def test_moves_off_a_slow_path_and_back() -> None:
    sel = PathSelector(4, bad_rounds=3, good_rounds=10)
    t = 0.0
    for _ in range(5):
        t = _round(sel, t, [RTT] * 4, [0.0] * 4)
    assert sel.weights == pytest.approx([0.25] * 4)
    first_bad = len(sel.moves)
    for _ in range(6):
        t = _round(sel, t, [RTT, RTT, RTT, 2 * RTT], [0.0] * 4)
    assert sel.moves[first_bad:][0][1:] == (3, False)
    assert sel.weights[3] < 0.01
    # hysteresis: a path back to 1.3x (inside the off band, outside the back band) stays off
    for _ in range(20):
        t = _round(sel, t, [RTT, RTT, RTT, 1.3 * RTT], [0.0] * 4)
    assert not sel.stats[3].active
    for _ in range(30):
        t = _round(sel, t, [RTT] * 4, [0.0] * 4)
    assert sel.stats[3].active and sel.moves[-1][1:] == (3, True)


def test_moves_off_a_lossy_path_within_a_few_rounds() -> None:
    sel = PathSelector(4)
    t = 0.0
    rounds = 0
    while sel.stats[2].active and rounds < 50:
        t = _round(sel, t, [RTT] * 4, [0.0, 0.0, 0.05, 0.0])
        rounds += 1
    assert rounds <= 8
    assert all(s.active for i, s in enumerate(sel.stats) if i != 2)


def test_a_path_moved_off_for_its_losses_stays_off_while_it_loses() -> None:
    # Before, a round could count as worse (its own losses, against this round's clean
    # paths) and as good (its loss EWMA, against the others' still high from a burst)
    # at once, and a path moved off after 3 worse rounds came back the next round
    sel = PathSelector(3)
    t = 0.0
    for _ in range(5):  # a burst of drops on paths 0 and 1: their EWMAs stay high
        t = _round(sel, t, [RTT] * 3, [0.5, 0.5, 0.0])
    for _ in range(5):
        t = _round(sel, t, [RTT] * 3, [0.0] * 3)
    assert not sel.moves
    for _ in range(15):  # now path 2 loses 10 % of every round
        t = _round(sel, t, [RTT] * 3, [0.0, 0.0, 0.1])
    assert [m[1:] for m in sel.moves] == [(2, False)]


def test_random_loss_everywhere_moves_nothing() -> None:
    sel = PathSelector(3)
    t = 0.0
    for _ in range(30):
        t = _round(sel, t, [RTT] * 3, [0.01] * 3)
    assert sel.moves == []


def test_pick_follows_weights_and_never_all_off() -> None:
    sel = PathSelector(3)
    sel.stats[1].active = False
    picks = [sel.pick() for _ in range(1000)]
    share = picks.count(1) / len(picks)
    assert share == pytest.approx(sel.weights[1], abs=0.005)
    sel.stats[0].active = sel.stats[2].active = False
    for s in sel.stats:
        s.srtt = RTT
    sel._end_round(1.0)
    assert any(s.active for s in sel.stats)


def test_normalized_rtt_removes_propagation_difference() -> None:
    sel = PathSelector(2)
    sel.on_ack(0.0, 0, 1, 0.025)
    sel.on_ack(0.0, 1, 1, 0.050)
    assert sel.normalized_rtt(1, 0.053) == pytest.approx(0.028)


@pytest.mark.parametrize(
    "kwargs", [{"paths": 0}, {"paths": 2, "rtt_back": 2.0}, {"paths": 2, "probe_weight": 1.0}]
)
def test_bad_parameters(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        PathSelector(**kwargs)


def test_one_burst_of_drops_on_a_good_path_moves_nothing() -> None:
    # before the per-round loss test, one round losing 10% kept the loss EWMA over the
    # margin for a dozen rounds, and the path was moved off three rounds later
    sel = PathSelector(4)
    t = 0.0
    for _ in range(5):
        t = _round(sel, t, [RTT] * 4, [0.0] * 4)
    t = _round(sel, t, [RTT] * 4, [0.0, 0.1, 0.0, 0.0])
    for _ in range(10):
        t = _round(sel, t, [RTT] * 4, [0.0] * 4)
    assert sel.moves == [] and all(s.active for s in sel.stats)


def test_congestion_drops_on_most_paths_do_not_make_the_clean_one_the_judge() -> None:
    # three paths drop 2% (they carry a moved path's traffic), one drops nothing: the
    # reference is the lower median path, so nobody is moved off
    sel = PathSelector(4)
    t = 0.0
    for _ in range(10):
        t = _round(sel, t, [RTT] * 4, [0.02, 0.02, 0.02, 0.0])
    assert sel.moves == []


def test_a_longer_path_is_moved_off_by_its_minimum_rtt_at_once() -> None:
    sel = PathSelector(4)
    t = _round(sel, 0.0, [RTT, RTT, RTT, 2 * RTT], [0.0] * 4)  # first samples: min RTTs
    rounds = 1
    while sel.stats[3].active and rounds < 50:
        t = _round(sel, t, [RTT, RTT, RTT, 2 * RTT], [0.0] * 4)
        rounds += 1
    assert rounds <= sel.bad_rounds + 1


def _sparse_round(
    sel: PathSelector, t: float, rtts: list[list[float]], lost: dict[int, int] | None = None
) -> float:
    """One round with few samples per path (``rtts[p]``, as on a real transfer: a couple
    of SACKs per round) and ``lost[p]`` chunks declared lost on path ``p``."""
    for p, samples in enumerate(rtts):
        for k, rtt in enumerate(samples):
            sel.on_ack(t + RTT * (k + 1) / (len(samples) + 1), p, 65536, rtt)
    for p, n in (lost or {}).items():
        for _ in range(n):
            sel.on_loss(t + RTT / 2, p, 65536)
    return t + RTT * 1.01


def test_a_host_stall_on_one_paths_samples_moves_nothing() -> None:
    # Two busy loops beside a transfer on two cores: the samples taken after the sender
    # ran again were 10-30x the path's RTT. Before, the smoothed RTT of the path that took
    # them stayed over 1.5x the others' for four rounds and that good path was moved off
    sel = PathSelector(3)
    t = 0.0
    for _ in range(6):
        t = _sparse_round(sel, t, [[RTT, RTT]] * 3)
    t = _sparse_round(sel, t, [[0.3, 0.3], [RTT, RTT], [RTT, RTT]])
    for _ in range(10):
        t = _sparse_round(sel, t, [[RTT, RTT]] * 3)
    assert sel.moves == [] and all(s.active for s in sel.stats)


def test_inflated_first_samples_move_nothing() -> None:
    # a transfer's first samples (a process still starting, slow start's queue) on one
    # path: before, they seeded its smoothed RTT (and its minimum) far above the others'
    sel = PathSelector(3)
    t = _sparse_round(sel, 0.0, [[0.1, 0.12], [RTT, RTT], [RTT, RTT]])
    for _ in range(10):
        t = _sparse_round(sel, t, [[RTT, RTT]] * 3)
    assert sel.moves == []


def test_a_slow_path_is_still_moved_off_with_sparse_samples() -> None:
    sel = PathSelector(3)
    t = 0.0
    for _ in range(6):
        t = _sparse_round(sel, t, [[RTT, RTT]] * 3)
    rounds = 0
    while sel.stats[2].active and rounds < 30:  # a standing queue: every sample is high
        t = _sparse_round(sel, t, [[RTT, RTT], [RTT, RTT], [2 * RTT, 2 * RTT]])
        rounds += 1
    assert not sel.stats[2].active and rounds <= 8  # a window of 8 samples, 3 bad rounds


def test_a_stall_on_every_path_does_not_stretch_the_rounds() -> None:
    # after a stall every path's smoothed RTT is several times the path's; rounds as
    # long as that gave a lossy path too few rounds to be moved off during a transfer
    sel = PathSelector(3)
    t = 0.0
    for _ in range(6):
        t = _sparse_round(sel, t, [[RTT, RTT]] * 3)
    t = _sparse_round(sel, t, [[0.5, 0.5]] * 3)
    start, rounds = t, 0
    while sel.stats[2].active and rounds < 30:
        t = _sparse_round(sel, t, [[RTT, RTT]] * 3, lost={2: 1})
        rounds += 1
    assert not sel.stats[2].active and t - start < 5 * RTT


def test_a_round_that_resolves_nothing_on_a_path_counts_neither_way() -> None:
    # a lossy path whose chunks resolve every other round: before, each silent round
    # counted as a good one, reset its count of worse rounds, and it was never moved off
    sel = PathSelector(3)
    t = 0.0
    for _ in range(6):
        t = _sparse_round(sel, t, [[RTT, RTT]] * 3)
    for _ in range(10):
        t = _sparse_round(sel, t, [[RTT, RTT], [RTT, RTT], [RTT]], lost={2: 1})
        t = _sparse_round(sel, t, [[RTT, RTT], [RTT, RTT], []])
    assert [m[1:] for m in sel.moves] == [(2, False)]
