"""Monte Carlo samplers: exactness of the record sampler and agreement with the analytic model."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from sdr.simulator import analytic
from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import Link
from sdr.simulator.loss import Bernoulli, GilbertElliott
from sdr.simulator.montecarlo import sample_max_delay, sample_scheme
from sdr.simulator.montecarlo_trace import sample_ec_trace, sample_sr_trace
from sdr.simulator.schemes import SchemeSpec
from sdr.simulator.stats import quantile_ci, summarize

LINK = Link(400e9, 0.025)


def _brute_force(rng: np.random.Generator, n: int, p: float, t: float, o: float, samples: int):
    z = rng.geometric(1 - p, size=(samples, n)) - 1
    return (np.arange(1, n + 1) * t + o * z).max(axis=1)


@pytest.mark.parametrize(("n", "p"), [(3, 0.5), (40, 0.05), (500, 0.01)])
def test_record_sampler_has_the_per_chunk_distribution(n: int, p: float) -> None:
    t, o = 1.0, 9.5
    rng = np.random.default_rng(11)
    brute = _brute_force(rng, n, p, t, o, 40_000)
    fast = sample_max_delay(rng, n, p, t, o, 40_000)
    assert stats.ks_2samp(brute, fast).pvalue > 0.01
    assert fast.mean() == pytest.approx(brute.mean(), rel=0.01)


def test_record_sampler_handles_per_sample_sizes_and_no_loss() -> None:
    rng = np.random.default_rng(0)
    n = np.array([0, 1, 5, 1000])
    out = sample_max_delay(rng, np.repeat(n, 1000), 0.0, 2.0, 7.0, 4000)
    assert np.array_equal(out, np.repeat(n * 2.0, 1000))
    lossy = sample_max_delay(rng, np.repeat(n, 1000), 0.1, 2.0, 7.0, 4000)
    assert np.all(lossy[:1000] == 0.0)
    assert np.all(lossy >= np.repeat(n * 2.0, 1000))


CASES = [
    ("sr-rto", 8 * 2**20, 1e-3),
    ("sr-rto", 128 * 2**10, 0.1),
    ("sr-nack", 1 * 2**30, 1e-2),
    ("ec-mds", 64 * 2**20, 0.1),
    ("ec-xor", 8 * 2**20, 0.05),
    ("ec-xor", 3 * 2**20 + 5 * 2**16, 0.1),  # partial last submessage
]


@pytest.mark.parametrize(("scheme", "size", "p"), CASES)
def test_mean_agrees_with_analytic_within_2_percent(scheme: str, size: int, p: float) -> None:
    spec = SchemeSpec(scheme)
    est = evaluate(LINK, size, p, spec, method="montecarlo", samples=10_000, seed=7)
    exact = analytic.scheme_mean(LINK, size, p, spec)
    assert est.mean_s == pytest.approx(exact, rel=0.02)
    assert est.analytic_mean_s == pytest.approx(exact)


@pytest.mark.parametrize(("scheme", "size", "p"), CASES)
def test_sampled_p999_ci_covers_exact_quantile(scheme: str, size: int, p: float) -> None:
    spec = SchemeSpec(scheme)
    est = evaluate(LINK, size, p, spec, method="montecarlo", samples=20_000, seed=3)
    assert est.quantile_method == "montecarlo"
    assert est.p999_ci_s[0] <= est.p999_s <= est.p999_ci_s[1]
    # a 99.9% interval (so six cases rarely miss by chance) must cover the exact quantile
    times, _ = sample_scheme(np.random.default_rng(3), LINK, size, p, spec, 20_000)
    lo, hi = quantile_ci(np.sort(times), 0.999, confidence=0.999)
    exact = analytic.scheme_quantile(0.999, LINK, size, p, spec)
    assert lo - 1e-9 <= exact <= hi + 1e-9


def test_fallback_fraction_matches_probability() -> None:
    spec = SchemeSpec("ec-mds", k=32, m=8)
    size, p = 64 * 2**20, 0.1
    _, fell = sample_scheme(np.random.default_rng(5), LINK, size, p, spec, 20_000)
    expected = analytic.ec_fallback_probability(LINK, size, p, spec)
    assert fell.mean() == pytest.approx(
        expected, abs=4 * np.sqrt(expected * (1 - expected) / 20_000)
    )


def test_seed_reproducibility() -> None:
    spec = SchemeSpec("sr-rto")
    a = evaluate(LINK, 2**20, 0.01, spec, method="montecarlo", samples=2000, seed=9)
    b = evaluate(LINK, 2**20, 0.01, spec, method="montecarlo", samples=2000, seed=9)
    c = evaluate(LINK, 2**20, 0.01, spec, method="montecarlo", samples=2000, seed=10)
    assert a == b and a.mean_s != c.mean_s


def test_quantile_ci_brackets_rank() -> None:
    x = np.arange(1, 10_001, dtype=float)
    lo, hi = quantile_ci(x, 0.5)
    assert 4900 < lo < 5000 < hi < 5100
    summary = summarize(x)
    assert summary.quantiles["p999"] == 9990.0


def test_trace_sampler_agrees_with_iid_model_for_bernoulli() -> None:
    link = Link(400e9, 0.025, chunk_size=16384)
    model = Bernoulli(1e-3)  # per packet, 4 packets per chunk
    p_chunk = model.chunk_drop_probability(link.packets_per_chunk)
    rng = np.random.default_rng(21)
    size = 2 * 2**20
    sr = sample_sr_trace(rng, link, size, model, SchemeSpec("sr-rto"), 6000)
    assert sr.mean() == pytest.approx(
        analytic.sr_mean(link, size, p_chunk, SchemeSpec("sr-rto")), rel=0.03
    )
    ec_spec = SchemeSpec("ec-xor", k=8, m=2)
    ec, fell = sample_ec_trace(rng, link, size, Bernoulli(0.02), ec_spec, 6000)
    p_ec = Bernoulli(0.02).chunk_drop_probability(link.packets_per_chunk)
    expected = analytic.ec_fallback_probability(link, size, p_ec, ec_spec)
    assert fell.mean() == pytest.approx(expected, abs=0.03)
    assert ec.mean() == pytest.approx(analytic.ec_mean(link, size, p_ec, ec_spec), rel=0.03)


def test_bursty_losses_hurt_ec_more_than_iid() -> None:
    # same long-run packet loss rate; bursts of 16 packets wipe out whole submessages
    link = Link(400e9, 0.025, chunk_size=4096)
    spec = SchemeSpec("ec-mds", k=8, m=2)
    rng = np.random.default_rng(4)
    _, iid = sample_ec_trace(rng, link, 2**20, Bernoulli(2e-3), spec, 3000)
    _, bursty = sample_ec_trace(rng, link, 2**20, GilbertElliott.from_rate(2e-3, 16), spec, 3000)
    assert bursty.mean() > 5 * iid.mean()
