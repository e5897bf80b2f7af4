"""Link model and loss models (per packet and vectorized)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdr.errors import ConfigError
from sdr.simulator.link import FIBRE_PROPAGATION_SPEED, Link, chunk_drop_probability
from sdr.simulator.loss import Bernoulli, GilbertElliott, LossModel, SizeDependent, TraceReplay


def test_paper_distance_gives_25ms_rtt() -> None:
    link = Link.from_distance(3.75e6, 400e9)
    assert link.rtt == pytest.approx(0.025)
    fibre = Link.from_distance(1e6, 400e9, propagation_speed=FIBRE_PROPAGATION_SPEED)
    assert fibre.rtt == pytest.approx(0.010)  # 5 us/km one way


def test_link_derived_quantities() -> None:
    link = Link(400e9, 0.025, mtu=4096, chunk_size=65536)
    assert link.t_inj_s == pytest.approx(65536 * 8 / 400e9)
    assert link.packets_per_chunk == 16
    assert link.num_chunks(128 * 1024) == 2
    assert link.num_chunks(128 * 1024 + 1) == 3
    assert link.ideal_time_s(8 * 2**20) == pytest.approx(128 * link.t_inj_s + 0.025)
    assert link.bdp_bytes == pytest.approx(400e9 * 0.025 / 8)
    assert link.default_rto_rtts == 3.0 and link.beta == 1.0


def test_chunk_drop_formula_matches_paper_example() -> None:
    # p = 1e-5 per packet, 64 packets per chunk -> about 6.4e-4 per chunk
    assert chunk_drop_probability(1e-5, "packet", 64) == pytest.approx(1 - (1 - 1e-5) ** 64)
    assert chunk_drop_probability(1e-5, "packet", 64) == pytest.approx(6.4e-4, rel=1e-3)
    assert chunk_drop_probability(1e-3, "chunk", 64) == 1e-3


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rate=0, rtt=0.01),
        dict(rate=1e9, rtt=-1),
        dict(rate=1e9, rtt=0.01, mtu=4096, chunk_size=5000),
        dict(rate=1e9, rtt=0.01, alpha=-1),
    ],
)
def test_bad_links_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        Link(**kwargs)


def test_bad_probabilities_are_rejected() -> None:
    with pytest.raises(ConfigError, match="drop probability"):
        chunk_drop_probability(1.0, "chunk", 4)
    with pytest.raises(ConfigError):
        Bernoulli(-0.1)
    with pytest.raises(ConfigError):
        GilbertElliott(0.1, 0.0)


def test_all_models_follow_the_protocol() -> None:
    for model in (
        Bernoulli(0.1),
        GilbertElliott(0.01, 0.5),
        SizeDependent(0.01),
        TraceReplay([0, 1]),
    ):
        assert isinstance(model, LossModel)


def test_bernoulli_per_packet_and_vectorized_rates() -> None:
    model = Bernoulli(0.05)
    rng = np.random.default_rng(1)
    per_packet = np.mean([model.drop(rng) for _ in range(20000)])
    assert per_packet == pytest.approx(0.05, abs=0.005)
    block = model.sample(rng, 50, 4000)
    assert block.shape == (50, 4000) and block.dtype == bool
    assert block.mean() == pytest.approx(0.05, abs=0.002)
    assert model.chunk_drop_probability(16) == pytest.approx(1 - 0.95**16)
    assert Bernoulli(0.05, unit="chunk").chunk_drop_probability(16) == 0.05


def test_gilbert_elliott_rate_and_bursts() -> None:
    model = GilbertElliott.from_rate(0.01, mean_burst=8)
    assert model.mean_rate() == pytest.approx(0.01)
    rng = np.random.default_rng(2)
    losses = model.sample(rng, 20, 200_000)
    assert losses.mean() == pytest.approx(0.01, rel=0.1)
    # bursts: mean run length of consecutive losses is ~8, far above Bernoulli's ~1
    flat = np.concatenate([np.concatenate(([0], row.astype(int), [0])) for row in losses])
    starts = np.flatnonzero(np.diff(flat) == 1)
    ends = np.flatnonzero(np.diff(flat) == -1)
    assert np.mean(ends - starts) == pytest.approx(8, rel=0.15)
    assert model.chunk_drop_probability(16) is None


def test_gilbert_elliott_per_packet_keeps_state() -> None:
    model = GilbertElliott(p_gb=0.001, p_bg=0.1)
    rng = np.random.default_rng(3)
    drops = np.array([model.drop(rng) for _ in range(100_000)])
    assert drops.mean() == pytest.approx(model.mean_rate(), rel=0.35)
    lost_after_lost = drops[1:][drops[:-1]].mean()
    assert lost_after_lost > 0.8  # in the bad state the next packet is lost with prob 0.9
    model.reset()
    assert model.bad is None


def test_size_dependent_loss_grows_with_size() -> None:
    model = SizeDependent(p_ref=1e-3, ref_size=1024)
    assert model.probability(1024) == pytest.approx(1e-3)
    assert model.probability(4096) == pytest.approx(1 - (1 - 1e-3) ** 4)
    rng = np.random.default_rng(4)
    assert model.sample(rng, 10, 100_000, size_bytes=4096).mean() == pytest.approx(
        model.probability(4096), rel=0.05
    )


def test_trace_replay_is_exact_and_loops(tmp_path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("0 0 1  # a loss\n0 1\n")
    model = TraceReplay.from_file(path)
    rng = np.random.default_rng(0)
    assert [model.drop(rng) for _ in range(7)] == [False, False, True, False, True, False, False]
    block = model.sample(rng, 4, 10)
    assert block.shape == (4, 10)
    assert math.isclose(block.mean(), 0.4)
    with pytest.raises(ConfigError):
        TraceReplay([0, 2])


@pytest.mark.parametrize(
    ("text", "where"), [("0 1\n0 x1\n", ":2: 'x1'"), ("1 2", ":1: '2'"), ("", "non-empty")]
)
def test_a_bad_trace_file_names_the_line(tmp_path, text, where) -> None:
    path = tmp_path / "trace.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match=where):
        TraceReplay.from_file(path)
    with pytest.raises(ConfigError, match="cannot read"):
        TraceReplay.from_file(tmp_path / "missing.txt")


def test_packet_level_helpers() -> None:
    link = Link(400e9, 0.025, alpha=2.0)
    assert link.one_way_delay == pytest.approx(0.0125)
    assert link.serialization_s(4096) == pytest.approx(4096 * 8 / 400e9)
    assert link.queue == pytest.approx(2 * link.bdp_bytes)
    assert link.with_chunk(16384).packets_per_chunk == 4
