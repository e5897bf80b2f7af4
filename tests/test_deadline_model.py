"""The deadline of a deadline-bounded allreduce from the analytic model."""

from __future__ import annotations

import pytest

from sdr.errors import ConfigError
from sdr.simulator import analytic
from sdr.simulator.deadline import deadline_for
from sdr.simulator.link import Link
from sdr.simulator.select import candidate_specs

LINK = Link(rate=1e9, rtt=0.025, mtu=8192, chunk_size=8192)
SIZE = 5_200_000


def test_the_deadline_is_the_smallest_quantile_of_any_scheme() -> None:
    d = deadline_for(LINK, SIZE, 1e-2, q=0.99)
    quantiles = [
        analytic.scheme_quantile(0.99, v, SIZE, v.chunk_drop(1e-2, "chunk"), s)
        for v, s in candidate_specs(LINK, drop_unit="chunk")
    ]
    assert d.seconds == min(quantiles)
    assert d.ideal_s < d.seconds < 2 * d.ideal_s


def test_a_surer_deadline_is_later_and_more_loss_never_earlier() -> None:
    assert deadline_for(LINK, SIZE, 1e-2, q=0.999).seconds >= deadline_for(LINK, SIZE, 1e-2).seconds
    assert deadline_for(LINK, SIZE, 1e-2).seconds >= deadline_for(LINK, SIZE, 1e-4).seconds


def test_bad_inputs_say_what_is_expected() -> None:
    with pytest.raises(ConfigError, match=r"q must be in \(0, 1\)"):
        deadline_for(LINK, SIZE, 1e-3, q=1.0)
    with pytest.raises(ConfigError, match="size must be > 0"):
        deadline_for(LINK, 0, 1e-3)
