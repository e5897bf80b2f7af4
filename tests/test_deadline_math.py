"""The decisions of a deadline-bounded allreduce: consistent, exact over what arrived,
nothing lost (carry-over), from the views contributors exchange."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdr.collectives.deadline import CarryOver, agree, combine, missed_part, slice_bounds
from sdr.errors import ConfigError


def test_a_slice_is_in_only_when_every_contributor_got_it() -> None:
    arrived = np.ones((3, 3, 2), dtype=bool)
    arrived[2, 0, 1] = False  # contributor 2 missed slice 1 of contributor 0
    arrived[1, 1, 0] = False  # a contributor's view of itself does not matter
    included = agree(arrived)
    assert included.tolist() == [[True, False], [True, True], [True, True]]


def test_the_mean_is_over_what_arrived_not_diluted_by_zeros() -> None:
    a, b = np.full(4, 2.0, np.float32), np.full(4, 6.0, np.float32)
    bounds = slice_bounds(4, 2)
    included = np.array([[True, True], [True, False]])  # b's second slice missed
    out, counts = combine([a, b], included, bounds)
    assert out.tolist() == [4.0, 4.0, 2.0, 2.0]  # not (2 + 0) / 2 = 1
    assert counts.tolist() == [2, 1]


def test_weight_is_the_ranks_each_contribution_sums() -> None:
    out, _ = combine(
        [np.full(2, 4.0), np.full(2, 8.0)], np.ones((2, 1), bool), slice_bounds(2, 1), 2
    )
    assert out.tolist() == [3.0, 3.0]  # (4 + 8) / (2 datacenters x 2 ranks)


def test_a_slice_nobody_made_is_zero_and_counted_as_such() -> None:
    out, counts = combine([np.ones(2), None], np.array([[False], [False]]), slice_bounds(2, 1))
    assert out.tolist() == [0.0, 0.0] and counts.tolist() == [0]


def test_bad_shapes_say_what_was_expected() -> None:
    with pytest.raises(ConfigError, match=r"\(D, D, S\)"):
        agree(np.ones((2, 3, 1), bool))
    with pytest.raises(ConfigError, match="slices"):
        slice_bounds(10, 0)
    with pytest.raises(ConfigError, match="average must be one of arrived, all"):
        combine([np.ones(2)], np.ones((1, 1), bool), slice_bounds(2, 1), average="some")
    carry = CarryOver(residual=np.zeros(3, np.float32))
    with pytest.raises(ConfigError, match="same shape and type"):
        carry.add_to(np.zeros(4, np.float32))


_VIEWS = {
    "d": st.integers(2, 4),
    "slices": st.integers(1, 6),
    "n": st.integers(1, 40),
    "seed": st.integers(0, 2**31 - 1),
}
"""Contributors, slices, elements and a seed: the shapes the consistency properties run over."""


@settings(max_examples=60, deadline=None)
@given(**_VIEWS)
def test_every_contributor_computes_the_same_bits(d: int, slices: int, n: int, seed: int) -> None:
    """Each contributor only holds its own data and what arrived; after the mask exchange
    all of them compute bitwise identical results."""
    rng = np.random.default_rng(seed)
    data = [rng.standard_normal(n).astype(np.float32) for _ in range(d)]
    arrived = rng.random((d, d, slices)) < 0.7
    included = agree(arrived)
    bounds = slice_bounds(n, slices)
    results = []
    for y in range(d):
        # what y holds: its own, and the slices of x that arrived at y (zeros elsewhere:
        # they must never be read)
        held = []
        for x in range(d):
            if x == y:
                held.append(data[x].copy())
                continue
            mine = np.full(n, np.nan, np.float32)
            for s in range(slices):
                if arrived[y, x, s]:
                    lo, hi = bounds[s], bounds[s + 1]
                    mine[lo:hi] = data[x][lo:hi]
            held.append(mine)
        out, _ = combine(held, included, bounds)
        results.append(out)
    for out in results[1:]:
        assert out.tobytes() == results[0].tobytes()
    assert not np.isnan(results[0]).any()


@settings(max_examples=60, deadline=None)
@given(**_VIEWS, average=st.sampled_from(["arrived", "all"]))
def test_a_result_combined_from_a_guess_and_put_right_is_the_fresh_one(
    d: int, slices: int, n: int, seed: int, average: str
) -> None:
    """The exchange combines while the peers' notes cross, from a guess of what is in;
    redoing only the slices the guess got wrong gives the bits of combining afresh."""
    rng = np.random.default_rng(seed)
    data = [rng.standard_normal(n).astype(np.float32) for _ in range(d)]
    bounds = slice_bounds(n, slices)
    guess = rng.random((d, slices)) < 0.7
    included = rng.random((d, slices)) < 0.7
    early, _ = combine(data, guess, bounds, 2.0, average)
    wrong = (guess != included).any(axis=0)
    fixed, counts = combine(data, included, bounds, 2.0, average, out=early, only=wrong)
    fresh, fresh_counts = combine(data, included, bounds, 2.0, average)
    assert fixed is early and fixed.tobytes() == fresh.tobytes()
    assert counts.tolist() == fresh_counts.tolist()


@settings(max_examples=40, deadline=None)
@given(
    d=st.integers(2, 3),
    slices=st.integers(1, 5),
    steps=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    average=st.sampled_from(["arrived", "all"]),
)
def test_carry_over_loses_nothing(d: int, slices: int, steps: int, seed: int, average: str) -> None:
    """Over a run, the sum of everything applied plus what is still carried equals the
    sum of everything produced (float64 here: exact up to rounding). With
    ``average="all"`` the mean applied is that sum over ``d``, every step."""
    rng = np.random.default_rng(seed)
    n = 17
    bounds = slice_bounds(n, slices)
    carries = [CarryOver() for _ in range(d)]
    produced = np.zeros(n)
    applied = np.zeros(n)
    for _ in range(steps):
        fresh = [rng.standard_normal(n) for _ in range(d)]
        produced += sum(fresh)
        sent = [carries[x].add_to(fresh[x]) for x in range(d)]
        included = agree(rng.random((d, d, slices)) < 0.6)
        out, counts = combine(sent, included, bounds, average=average)
        for s in range(slices):
            lo, hi = bounds[s], bounds[s + 1]
            n_in = counts[s] if average == "arrived" else d
            applied[lo:hi] += out[lo:hi] * n_in  # the mean times what it divides by
        for x in range(d):
            carries[x].settle(sent[x], included[x], bounds)
    still = sum(c.residual for c in carries if c.residual is not None)
    np.testing.assert_allclose(applied + still, produced, rtol=1e-9, atol=1e-9)


def test_a_staleness_weight_carries_that_part_of_a_missed_slice() -> None:
    carry = CarryOver(weight=0.5)
    sent = carry.add_to(np.full(4, 8.0))
    carry.settle(sent, np.array([True, False]), slice_bounds(4, 2))
    assert carry.residual is not None and carry.residual.tolist() == [0.0, 0.0, 4.0, 4.0]
    again = carry.add_to(np.zeros(4))
    carry.settle(again, np.array([True, False]), slice_bounds(4, 2))  # missed again
    assert carry.residual.tolist() == [0.0, 0.0, 2.0, 2.0]


def test_carry_must_be_a_flag_or_a_weight() -> None:
    from sdr.backends.hierarchical.communicator import _carry_weight

    assert (_carry_weight(True), _carry_weight(False), _carry_weight(0.25)) == (1.0, 0.0, 0.25)
    assert _carry_weight("local") == 0.0  # the caller keeps it, nothing carried here
    for bad in (1.5, "loc"):
        with pytest.raises(
            ConfigError, match=r"carry must be True, False, 'local' or a weight in \[0, 1\]"
        ):
            _carry_weight(bad)


def test_the_local_carry_is_the_own_contribution_where_its_slices_missed() -> None:
    own = np.arange(1.0, 11.0)  # 10 elements, two shards of 6 (padded): 0-5 and 6-9 (+2)
    mine_in = np.array([[True, False], [False, True]])  # shard 0 slice 1, shard 1 slice 0
    kept = missed_part(own, mine_in, shard=6)
    assert kept is not None
    assert kept.tolist() == [0, 0, 0, 4, 5, 6, 7, 8, 9, 0]
    assert missed_part(own, np.ones((2, 2), bool), shard=6) is None  # all in
    edge = missed_part(own, np.array([[True, True], [True, False]]), shard=6)
    assert edge is not None and edge.tolist() == [0] * 9 + [10]  # the padding is cut off
    with pytest.raises(ConfigError, match=r"shape \(local, S\)"):
        missed_part(own, np.ones(2, bool), shard=6)


@given(
    mask=st.lists(st.booleans(), min_size=6, max_size=6),
    stale=st.floats(allow_nan=False, allow_infinity=False),
)
def test_the_local_carry_written_into_a_reused_buffer_is_the_fresh_one(
    mask: list[bool], stale: float
) -> None:
    """Whatever the buffer held (an earlier step's kept part), it ends as the fresh
    result, in place; left as it was when nothing missed."""
    own = np.arange(1.0, 15.0)  # 14 elements: two shards of 7 (padded 8): 3 slices each
    mine_in = np.array(mask).reshape(2, 3)
    buffer = np.full(own.shape, stale)
    got = missed_part(own, mine_in, shard=8, out=buffer)
    fresh = missed_part(own, mine_in, shard=8)
    if fresh is None:
        assert got is None and (buffer == stale).all()
    else:
        assert got is buffer and np.array_equal(buffer, fresh)


def test_a_kept_buffer_of_another_shape_or_dtype_is_refused() -> None:
    own = np.arange(10.0)
    for wrong in (np.zeros(9), np.zeros(10, np.float32)):
        with pytest.raises(ConfigError, match="the kept part's buffer is"):
            missed_part(own, np.array([[False]]), shard=10, out=wrong)


@given(
    guess=st.lists(st.booleans(), min_size=6, max_size=6),
    final=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_the_local_carry_redone_over_a_guess_is_the_fresh_one(
    guess: list[bool], final: list[bool]
) -> None:
    """The kept part made from a guess while the notes crossed, then redone only where
    the notes differ from it, has the bits of the kept part made from the notes."""
    own = np.arange(1.0, 15.0)  # 14 elements: two shards of 7 (padded 8): 3 slices each
    guessed, decided = np.array(guess).reshape(2, 3), np.array(final).reshape(2, 3)
    buffer = np.full(own.shape, -1.0)
    if missed_part(own, guessed, shard=8, out=buffer) is None:
        buffer[:] = 0.0  # nothing missed in the guess: the result of no slice is there
        guessed = np.ones_like(guessed)
    fresh = missed_part(own, decided, shard=8)
    if fresh is None:
        return  # all in: nothing is handed back (the caller does not redo)
    got = missed_part(own, decided, shard=8, out=buffer, only=guessed != decided)
    assert got is buffer and np.array_equal(buffer, fresh)
    with pytest.raises(ConfigError, match="only= needs out="):
        missed_part(own, decided, shard=8, only=guessed != decided)
