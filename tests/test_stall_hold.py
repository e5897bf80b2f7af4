"""The connection-wide no-progress deadline: every message's deadline stays at least the
stall timeout after the last progress, with one push per sixteenth of it (not one per
machine per round)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sdr.reliability.stall_hold import StallHold


@given(st.lists(st.floats(0.0, 5.0, allow_nan=False), min_size=1, max_size=200))
def test_every_deadline_covers_the_stall_after_the_last_progress(gaps: list[float]) -> None:
    hold, stall, now, held = StallHold(), 2.0, 0.0, -np.inf
    for gap in gaps:
        now += gap
        until = hold.push(now, stall)
        if until is not None:
            held = until
        assert held >= now + stall  # the machines hold at least until now + stall


def test_progress_every_round_pushes_once_per_sixteenth_of_the_stall() -> None:
    hold, stall = StallHold(), 1.6
    pushes = sum(hold.push(t * 1e-3, stall) is not None for t in range(10_000))  # 10 s, 1 ms
    assert 95 <= pushes <= 101  # 10 s / (1.6 s / 16), not 10,000
