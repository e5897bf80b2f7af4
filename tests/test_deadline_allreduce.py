"""Deadline-bounded allreduce on a 2 x 2-rank loopback job (two datacenters of two ranks):
consistent on every rank, the mean over what arrived, and nothing lost (carry-over), with
late slices injected at one rank."""

from __future__ import annotations

import time

import numpy as np
import pytest

from sdr.backends.hierarchical import SdrLinkOptions, connect, deadline_exchange
from sdr.backends.hierarchical.local_job import run_ranks
from sdr.backends.shm import free_port
from sdr.collectives.deadline import slice_bounds
from sdr.errors import ConfigError

DCS, LOCAL, N, SLICES = 2, 2, 4000, 4
WORLD = DCS * LOCAL
SHARD = N // LOCAL  # shard l of every rank: elements [l * SHARD, (l + 1) * SHARD)


def _data(rank: int, step: int) -> np.ndarray:
    return np.random.default_rng(100 * step + rank).standard_normal(N).astype(np.float32)


def _job() -> list[dict]:
    port = free_port()
    opts = SdrLinkOptions(scheme="sr-nack", rtt="2ms", rate="4Gbit/s", loss=1e-3, timeout=30)

    def body(rank: int) -> dict:
        # the notes are seen out within 0.1 s, then left to the background thread; four
        # ranks on a loaded 2-core host can take longer, and "out on return" is the point
        deadline_exchange.NOTES_BOUND_S = 30.0
        comm = connect(rank, WORLD, LOCAL, port=port, options=opts)
        intra, posted = comm._intra, []

        def spy(op: str, *args: object) -> object:  # receives open when local work begins?
            if op == "reduce_scatter":  # calls whose receives are posted, this one's too?
                posted.append(comm._deadline._calls)
            return intra(op, *args)

        comm._intra = spy
        run, guesses = comm._deadline.run, []

        def spy_run(*args: object, while_waiting, **kwargs: object) -> object:
            # what the call combined from while the notes crossed, beside what they said
            seen: list[np.ndarray] = []

            def early(contributions: list, guess: np.ndarray) -> None:
                seen.append(guess.copy())
                while_waiting(contributions, guess)

            got = run(*args, while_waiting=early, **kwargs)
            guesses.append((seen, got[1]))
            return got

        comm._deadline.run = spy_run
        try:
            out: dict = {"posted": posted, "guesses": guesses}
            # 1. nothing late: the plain mean, every contribution in
            out["full"] = comm.allreduce_by(_data(rank, 0), 30.0, slices=SLICES)
            out["unanimous"] = comm._deadline.unanimous  # everything crossed: no wait
            # ...and our note is on the wire when the call returns (the peer may wait
            # for it: before, it waited for the background thread)
            out["notes_out"] = all(h.rqp.sent(h) for h, _ in comm._deadline._masks_out)
            # 2. rank 0 (datacenter 0, local 0) withholds slice 1 of its shard
            late = (1,) if rank == 0 else ()
            out["late"] = comm.allreduce_by(
                _data(rank, 1), 0.5, slices=SLICES, withhold=late, average="arrived"
            )
            # 3. the next call carries what missed
            out["next"] = comm.allreduce_by(_data(rank, 2), 30.0, slices=SLICES)
            out["carries"] = {str(k): c.residual for k, c in comm.carries.items()}
            # 4. average over all (a missing contribution counts as zero), no carry-over
            out["all"] = comm.allreduce_by(
                _data(rank, 3), 0.5, slices=SLICES, withhold=late, average="all", carry=False
            )
            out["after"] = {str(k): c.residual for k, c in comm.carries.items()}
            # 5. the defaults: with carry-over, averaged over all ranks
            out["default"] = comm.allreduce_by(_data(rank, 6), 0.5, slices=SLICES, withhold=late)
            # 6. local carry: both ranks of datacenter 0 withhold a slice of their shards;
            # each gets its own part of both back, and nothing is carried here
            mine = {0: (1,), 1: (3,)}.get(rank, ())
            out["local"] = comm.allreduce_by(
                _data(rank, 7), 0.5, slices=SLICES, withhold=mine, carry="local", key="local"
            )
            out["local_carries"] = comm.carries["local"].residual
            return out
        finally:
            comm.close()

    return run_ranks(WORLD, body, timeout=120)


def test_deadline_allreduce_is_consistent_exact_and_loses_nothing() -> None:
    results = _job()
    for name in ("full", "late", "next", "all"):
        first = results[0][name][0]
        for r in range(WORLD):
            assert results[r][name][0].tobytes() == first.tobytes(), (name, r)

    # our clear-to-sends date our entry at the peer: the receives are posted before the
    # local work (the datacenter's reduce-scatter, the carry), not after it (1-14 ms)
    for r in range(WORLD):
        assert results[r]["posted"] == list(range(1, 7)), r  # six calls, each opened

    # 1. complete: the mean of all four ranks
    mean = np.mean([_data(r, 0) for r in range(WORLD)], axis=0)
    np.testing.assert_allclose(results[0]["full"][0], mean, rtol=1e-5, atol=1e-6)
    for r in range(WORLD):
        report = results[r]["full"][1]
        assert report.complete and report.fraction_in == 1.0
        # two datacenters, everything here and acknowledged: decided without the peer's
        # note (which lands later, unread: the calls below still match theirs)
        assert results[r]["unanimous"] == 1
        assert results[r]["notes_out"], r
        # the timeline says so too, and its phases come in order within the call
        line = report.timeline
        assert line["decision"] == "unanimous", line
        assert 0 <= line["setup"] <= line["stopped"] <= line["agreed"] <= report.seconds, line
        assert line["stopped"] < line["cut"], line  # done before the cut was due
    for r in range(WORLD):
        # a call the notes decided combined while they crossed, from a guess that holds
        # nothing they did not (a peer's note has every slice it acknowledged); a call
        # decided without them made no guess
        for i, (seen, arrived) in enumerate(results[r]["guesses"]):
            decision = results[r][("full", "late", "next", "all", "default", "local")[i]][1]
            assert len(seen) == (decision.timeline["decision"] == "notes"), (r, i)
            for guess in seen:
                assert not (guess & ~arrived).any(), (r, i, guess, arrived)
    for r in (0, 2):  # a withheld slice: the peers' notes decided
        line = results[r]["late"][1].timeline
        assert line["decision"] == "notes", line
        assert line["entered"] is not None and line["cut"] >= 0.5, line  # T from an entry
        assert line["stopped"] <= line["agreed"], line

    # 2. slice 1 of shard 0 from datacenter 0 is out: there, the mean over datacenter 1
    lo, hi = (slice_bounds(SHARD, SLICES)[1:3]).tolist()
    missed = slice(lo, hi)  # shard 0 starts at element 0
    got = results[0]["late"][0]
    dc1 = np.mean([_data(r, 1) for r in (2, 3)], axis=0)
    everyone = np.mean([_data(r, 1) for r in range(WORLD)], axis=0)
    np.testing.assert_allclose(got[missed], dc1[missed], rtol=1e-5, atol=1e-6)
    rest = np.ones(N, bool)
    rest[missed] = False
    np.testing.assert_allclose(got[rest], everyone[rest], rtol=1e-5, atol=1e-6)
    for r in (0, 2):  # the two ranks of local index 0 agree on the mask
        report = results[r]["late"][1]
        assert report.included.tolist() == [[True, False, True, True], [True] * 4]
        assert report.counts.tolist() == [2, 1, 2, 2] and not report.complete
        assert report.fraction_in == 7 / 8
    assert results[0]["late"][1].carried and not results[2]["late"][1].carried
    for r in (1, 3):
        assert results[r]["late"][1].complete

    # 3. datacenter 0's missed slice comes with the next call: the sum over both calls of
    # everything applied equals everything produced
    nxt = results[0]["next"][0]
    dc0_late = np.sum([_data(r, 1) for r in (0, 1)], axis=0)
    expect = np.mean([_data(r, 2) for r in range(WORLD)], axis=0)
    expect[missed] += dc0_late[missed] / WORLD
    np.testing.assert_allclose(nxt, expect, rtol=1e-5, atol=1e-5)
    applied = results[0]["late"][0] * np.where(rest, WORLD, LOCAL) + results[0]["next"][0] * WORLD
    produced = np.sum([_data(r, s) for r in range(WORLD) for s in (1, 2)], axis=0)
    np.testing.assert_allclose(applied, produced, rtol=1e-4, atol=1e-4)
    for r in range(WORLD):
        assert all(v is None for v in results[r]["carries"].values())  # all paid

    # 4. average="all": the missed slice is datacenter 1's sum over all four ranks, and
    # with carry=False nothing is kept
    got = results[0]["all"][0]
    dc1_sum = np.sum([_data(r, 3) for r in (2, 3)], axis=0)
    np.testing.assert_allclose(got[missed], dc1_sum[missed] / WORLD, rtol=1e-5, atol=1e-6)
    everyone = np.mean([_data(r, 3) for r in range(WORLD)], axis=0)
    np.testing.assert_allclose(got[rest], everyone[rest], rtol=1e-5, atol=1e-6)
    for r in range(WORLD):
        assert results[r]["all"][0].tobytes() == got.tobytes()
        assert all(v is None for v in results[r]["after"].values())

    # 5. default with carry-over: over all ranks, and the missed slice is carried
    got = results[0]["default"][0]
    dc1_sum = np.sum([_data(r, 6) for r in (2, 3)], axis=0)
    np.testing.assert_allclose(got[missed], dc1_sum[missed] / WORLD, rtol=1e-5, atol=1e-6)
    assert results[0]["default"][1].carried

    # 6. carry="local": averaged over all, nothing carried, each rank of datacenter 0 is
    # handed its own contribution where datacenter 0's slices missed (both shards' masks)
    bounds = slice_bounds(SHARD, SLICES)
    out_dc0 = np.zeros(N, bool)
    out_dc0[bounds[1] : bounds[2]] = True  # shard 0, slice 1
    out_dc0[SHARD + bounds[3] : SHARD + bounds[4]] = True  # shard 1, slice 3
    got = results[0]["local"][0]
    dc1_sum = np.sum([_data(r, 7) for r in (2, 3)], axis=0)
    everyone = np.mean([_data(r, 7) for r in range(WORLD)], axis=0)
    np.testing.assert_allclose(got[out_dc0], dc1_sum[out_dc0] / WORLD, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[~out_dc0], everyone[~out_dc0], rtol=1e-5, atol=1e-6)
    for r in range(WORLD):
        assert results[r]["local"][0].tobytes() == got.tobytes()
        assert results[r]["local_carries"] is None
        kept = results[r]["local"][1].kept
        if r in (2, 3):
            assert kept is None
            continue
        assert kept.shape == (N,) and kept.dtype == np.float32
        np.testing.assert_array_equal(kept[out_dc0], _data(r, 7)[out_dc0])
        assert not kept[~out_dc0].any()


def test_a_slow_site_costs_the_others_one_deadline_and_its_data_comes_next_call() -> None:
    """One rank per datacenter; datacenter 1 enters 1.5 s late. Datacenter 0 decides at
    its deadline that nothing is in (nobody was in the call with it) without waiting for
    the late site; the late site reaches the same decision from what it learns; both
    carry everything, and the next call (both on time) brings it all in."""
    port = free_port()
    opts = SdrLinkOptions(scheme="sr-nack", rtt="2ms", rate="4Gbit/s", loss=1e-3, timeout=30)

    def body(rank: int) -> dict:
        comm = connect(rank, 2, 1, port=port, options=opts)
        try:
            if rank == 1:
                time.sleep(1.5)
            start = time.monotonic()
            late = comm.allreduce_by(_data(rank, 4), 0.3, slices=SLICES, average="all")
            took = time.monotonic() - start
            comm.bootstrap.barrier()  # both on time for the next call
            nxt = comm.allreduce_by(_data(rank, 5), 30.0, slices=SLICES, average="all")
            return {"late": late, "took": took, "next": nxt, "alone": comm._deadline.alone}
        finally:
            comm.close()

    results = run_ranks(2, body, timeout=120)
    assert results[0]["took"] < 1.2  # one deadline and a little, not the late site's 1.5 s
    for r in results:
        assert r["late"][1].fraction_in == 0.0 and r["late"][1].carried
        assert not r["late"][0].any()  # nothing in: no update
        assert r["late"][0].tobytes() == results[0]["late"][0].tobytes()
        assert r["next"][1].complete
        assert r["next"][0].tobytes() == results[0]["next"][0].tobytes()
    assert results[0]["alone"] == 1
    both = np.sum([_data(r, s) for r in (0, 1) for s in (4, 5)], axis=0) / 2
    np.testing.assert_allclose(results[0]["next"][0], both, rtol=1e-5, atol=1e-5)


def test_a_guess_the_notes_correct_leaves_no_trace_one_rank_per_datacenter() -> None:
    """The result is combined while the notes cross, from a guess. Rank 1's guess here
    misses a slice of its own that did arrive (as when its acknowledgement is still on
    the way): once the notes are in, the result and the kept part (none: all of rank 1's
    is in; rank 0's redone from its guess's) are those of the notes, not the guess, and
    the same bits on both ranks. The
    input is averaged in place and the kept part is still the rank's own input."""
    port = free_port()
    opts = SdrLinkOptions(scheme="sr-nack", rtt="2ms", rate="4Gbit/s", loss=1e-3, timeout=30)
    slices, n = 4, 1000

    def body(rank: int) -> dict:
        comm = connect(rank, 2, 1, port=port, options=opts)
        guess = comm._deadline._guess

        def wrong(mine, writes, order, stopped):  # type: ignore[no-untyped-def]
            arrived = guess(mine, writes, order, stopped)
            if rank == 1:
                arrived[0, 1, 2] = False  # "slice 2 of ours: no acknowledgement yet"
            return arrived

        comm._deadline._guess = wrong
        x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        stale = np.full(n, 7.0, np.float32)  # a reused buffer still holding an old step's
        try:
            with pytest.raises(ConfigError, match="kept_out must be a contiguous float32"):
                comm.allreduce_by(x, 0.5, carry="local", kept_out=stale[::2])  # before any I/O
            late = (1,) if rank == 0 else ()
            mine = x.copy()  # averaged in place (as the torch group does): the kept part
            out, report = comm.allreduce_by(mine, 0.5, slices=slices, withhold=late,
                                            carry="local", kept_out=stale, out=mine)  # fmt: skip
            assert out is mine
            return {"out": out, "report": report, "x": x, "stale": stale}
        finally:
            comm.close()

    results = run_ranks(2, body, timeout=120)
    a, b = results
    assert a["out"].tobytes() == b["out"].tobytes()
    assert a["report"].timeline["decision"] == b["report"].timeline["decision"] == "notes"
    bounds = slice_bounds(n, slices)
    missed = slice(int(bounds[1]), int(bounds[2]))  # rank 0's slice 1
    both = (a["x"] + b["x"]) / 2
    np.testing.assert_array_equal(
        np.delete(a["out"], np.r_[missed]), np.delete(both, np.r_[missed])
    )
    np.testing.assert_array_equal(a["out"][missed], b["x"][missed] / 2)
    assert b["report"].kept is None  # all of rank 1's is in, whatever its guess said
    # its buffer held the guess's kept part meanwhile (slice 2 of its input): with
    # kept None, what the buffer holds is not promised
    guess_2 = slice(int(bounds[2]), int(bounds[3]))
    np.testing.assert_array_equal(b["stale"][guess_2], b["x"][guess_2])
    kept = a["report"].kept
    assert np.shares_memory(kept, a["stale"])  # written into the buffer it was given
    np.testing.assert_array_equal(kept[missed], a["x"][missed])
    assert not np.delete(kept, np.r_[missed]).any()  # nothing of the old step's is left


def test_a_rank_that_heard_the_peer_never_decides_alone() -> None:
    """Rank 1's slices all miss (withheld); rank 0's go out slowly (10 Mbit/s), so the
    first ones arrive and the rest are stopped half a round trip before the cut. Rank 0
    then holds nothing of the peer's and has no write in flight, but the peer was in the
    call (its clear-to-sends came): rank 0 must wait for its note. Before, "alone" was
    read from writes still in flight, and a stopped write is not: rank 0 decided that
    nothing was in while rank 1 had some of rank 0's slices, and the results differed (a
    replica diverged in a DiLoCo run)."""
    port = free_port()
    opts = SdrLinkOptions(scheme="sr-nack", rtt="100ms", rate="10Mbit/s", loss=0, timeout=30)
    slices, n = 4, 400_000  # 400 KB slices: 0.32 s each at 10 Mbit/s

    def body(rank: int) -> dict:
        comm = connect(rank, 2, 1, port=port, options=opts)
        x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        try:
            late = tuple(range(slices)) if rank == 1 else ()
            out, report = comm.allreduce_by(x, 0.3, slices=slices, withhold=late, carry=False)
            return {"out": out, "report": report, "x": x}
        finally:
            comm.close()

    a, b = run_ranks(2, body, timeout=120)
    assert a["report"].timeline["decision"] == "notes"
    assert a["out"].tobytes() == b["out"].tobytes()
    included = a["report"].included
    assert included[0].any() and not included[0].all()  # some of rank 0's crossed
    assert not included[1].any()


def test_three_datacenters_agree_on_a_late_slice() -> None:
    """Three datacenters, one rank each: every peer's entry must be known before a rank
    stops its writes, each rank hears two peers, and a slice is in only where both
    other datacenters had it. Rank 2 withholds slice 1: no rank counts it, everything
    else is the plain mean, and the three results are the same bits."""
    port = free_port()
    opts = SdrLinkOptions(scheme="sr-nack", rtt="2ms", rate="4Gbit/s", loss=0, timeout=30)
    slices, n = 4, 4000

    def body(rank: int) -> dict:
        comm = connect(rank, 3, 1, port=port, options=opts)
        x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        try:
            late = (1,) if rank == 2 else ()
            out, report = comm.allreduce_by(
                x, 0.5, slices=slices, withhold=late, carry=False, average="arrived"
            )
            return {"out": out, "report": report, "x": x}
        finally:
            comm.close()

    ranks = run_ranks(3, body, timeout=120)
    assert ranks[0]["out"].tobytes() == ranks[1]["out"].tobytes() == ranks[2]["out"].tobytes()
    included = ranks[0]["report"].included
    expected = np.ones((3, slices), bool)
    expected[2, 1] = False
    np.testing.assert_array_equal(included, expected)
    assert all(r["report"].timeline["decision"] == "notes" for r in ranks)
    bounds = slice_bounds(n, slices)
    late = slice(int(bounds[1]), int(bounds[2]))
    xs = [r["x"] for r in ranks]
    np.testing.assert_allclose(ranks[0]["out"][late], (xs[0][late] + xs[1][late]) / 2, rtol=1e-6)
    keep = np.ones(n, bool)
    keep[late] = False
    np.testing.assert_allclose(ranks[0]["out"][keep], (xs[0] + xs[1] + xs[2])[keep] / 3, rtol=1e-5)
