"""Multipath with most paths gone, on simulated time: the last good path carries the
transfer to the end, and paths that come back are used again.

Before: with four paths under ``delay``, black-holing paths 1-3 mid-transfer failed a
16 MiB write at its 30 s global timeout in 4 of 5 runs on the emulator; in the DES below
it took 1.36 s against 0.35 s on one path (the selector judged paths against the lower
median, a dead one, so three quarters of all chunks and repairs went into the holes).
Also the simulator's per-path blackouts (``DesOptions.path_blackouts``) themselves.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdr.congestion import paths as paths_module
from sdr.errors import ConfigError
from sdr.simulator.des import DesOptions, simulate_writes
from sdr.simulator.des_link import check_path_blackouts, dark
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec

LINK = Link(4e8, 0.01)  # 400 Mbit/s, 10 ms: 16 MiB is ~0.35 s
SIZE = 16 << 20
GONE = ((0.1, 1e3),)  # from 0.1 s on, for good


@pytest.fixture
def selectors(monkeypatch) -> list[paths_module.PathSelector]:
    """Every path selector made during the test (the sender's is the first)."""
    made: list[paths_module.PathSelector] = []
    init = paths_module.PathSelector.__init__

    def record(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(paths_module.PathSelector, "__init__", record)
    return made


def _write(scheme: str, paths: int, blackouts: tuple = (), size: int = SIZE):
    opts = DesOptions(congestion="delay", paths=paths, path_blackouts=blackouts)
    run = simulate_writes(LINK, size, SchemeSpec(scheme), None, samples=1, seed=1, options=opts)
    assert run.failed == 0
    return run


@pytest.mark.parametrize("scheme", ["sr-nack", "sr-rto"])
def test_three_of_four_paths_black_holed_mid_transfer_still_complete(scheme, selectors) -> None:
    one = _write(scheme, 1)
    run = _write(scheme, 4, ((), GONE, GONE, GONE))
    assert run.link["a->b"]["blackout_drops"] > 0  # the holes swallowed packets
    # the last path carries the rest at the link's rate (before: 3.9 x)
    assert run.times_s[0] < 1.5 * one.times_s[0]
    sender = selectors[0]  # the sender's: made first
    assert sender.alive == [0]
    assert sorted(p for _, p, alive in sender.liveness if not alive) == [1, 2, 3]


def test_paths_that_come_back_carry_traffic_again(selectors) -> None:
    brief = ((0.1, 0.2),)
    one = _write("sr-nack", 1, size=2 * SIZE)
    run = _write("sr-nack", 4, ((), brief, brief, brief), size=2 * SIZE)
    sender = selectors[0]  # the sender's (one path: no multipath, no selector)
    assert sender.alive == [0, 1, 2, 3]
    back = {p for _, p, alive in sender.liveness if alive}
    assert back == {1, 2, 3}
    assert run.times_s[0] < one.times_s[0] + 2 * (brief[0][1] - brief[0][0])


def test_an_outage_of_every_path_kills_none(selectors) -> None:
    short = ((0.1, 0.2),)
    _write("sr-nack", 4, (short, short, short, short))
    assert selectors[0].liveness == []


def test_blackouts_drop_only_their_paths_data_in_their_interval() -> None:
    blackouts = check_path_blackouts(((), ((0.5, 0.8),)))
    starts = np.array([0.4, 0.5, 0.6, 0.8, 0.6])
    paths = np.array([1, 1, 1, 1, 0])
    assert dark(blackouts, starts, paths).tolist() == [False, True, True, False, False]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: DesOptions(path_blackouts=(((0.8, 0.5),),)), "0 <= start <= end"),
        (lambda: DesOptions(path_blackouts=((("a", 1),),)), "blackouts must be, per path"),
        (lambda: DesOptions(paths=0), r"paths must be an integer in \[1, 16\]"),
        (
            lambda: DesOptions(path_blackouts=((), ((0, 1),))),
            "path_blackouts name 2 paths but there are 1",
        ),
    ],
)
def test_bad_blackouts_and_paths_are_one_line_errors(make, words) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        make()
    assert "\n" not in str(info.value)
