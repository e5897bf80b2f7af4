"""Analytic SR and EC models against brute-force enumeration and the paper's formulas."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from sdr.simulator import analytic
from sdr.simulator.ec_model import ECLayout, mds_success, retransmit_distribution, xor_success
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec
from sdr.simulator.sr_model import max_delay_cdf, max_delay_mean, max_delay_quantile

LINK = Link(400e9, 0.025)


def _lattice_mean(n: int, p: float, t: float, o: float, levels: int = 60) -> float:
    """E[max X] by summing s * dF over every lattice point (exact, slow)."""
    grid = np.arange(1, n + 1)[:, None] * t + o * np.arange(levels)[None, :]
    points = np.unique(grid.ravel())
    cdf = max_delay_cdf(points, n, p, t, o)
    return float(np.sum(points * np.diff(np.concatenate(([0.0], cdf)))))


def test_cdf_is_the_product_formula() -> None:
    n, p, t, o = 5, 0.2, 1.0, 3.5
    for s in (5.0, 6.0, 8.5, 9.0, 12.7, 30.0):
        expected = 1.0
        for i in range(1, n + 1):
            j = math.floor((s - i * t) / o + 1e-12)
            expected *= 1 - p ** (j + 1) if j >= 0 else 0.0
        assert max_delay_cdf(s, n, p, t, o)[0] == pytest.approx(expected, rel=1e-12)
    assert max_delay_cdf(4.99, n, p, t, o)[0] == 0.0


@pytest.mark.parametrize(("n", "p"), [(1, 0.3), (10, 0.1), (200, 0.01), (1000, 0.3)])
def test_mean_matches_exact_lattice_sum(n: int, p: float) -> None:
    t, o = 1.0, 7.3
    assert max_delay_mean(n, p, t, o) == pytest.approx(_lattice_mean(n, p, t, o), rel=1e-9)


def test_closed_form_mean_for_long_messages() -> None:
    # 30,000 chunks x 12 retry levels is past the exact-sum limit: the closed form is used
    n, p, t, o = 30_000, 0.01, 1.0, 5000.0
    exact = _lattice_mean(n, p, t, o, levels=14)
    assert max_delay_mean(n, p, t, o) == pytest.approx(exact, rel=1e-4)


def test_single_chunk_mean_is_geometric() -> None:
    # one chunk: E[T + O Z] = T + O p / (1 - p)
    t, o, p = 1.0, 5.0, 0.25
    assert max_delay_mean(1, p, t, o) == pytest.approx(t + o * p / (1 - p), rel=1e-9)


def test_quantile_is_the_first_point_reaching_the_level() -> None:
    n, p, t, o = 300, 0.02, 1.0, 40.0
    for q in (0.5, 0.99, 0.999):
        x = max_delay_quantile(q, n, p, t, o)
        assert max_delay_cdf(x, n, p, t, o)[0] >= q
        assert max_delay_cdf(x - 0.01, n, p, t, o)[0] < q


def test_lossless_times_are_ideal() -> None:
    spec = SchemeSpec("sr-rto")
    size = 8 * 2**20
    assert analytic.sr_mean(LINK, size, 0.0, spec) == pytest.approx(LINK.ideal_time_s(size))
    assert analytic.sr_quantile(0.999, LINK, size, 0.0, spec) == pytest.approx(
        LINK.ideal_time_s(size)
    )
    ec = SchemeSpec("ec-mds", k=32, m=8)
    assert analytic.ec_mean(LINK, size, 0.0, ec) == pytest.approx((128 + 32) * LINK.t_inj_s + 0.025)


def test_mds_success_by_enumeration() -> None:
    k, m, p = 4, 2, 0.3
    total = 0.0
    for pattern in itertools.product((0, 1), repeat=k + m):
        if sum(pattern) <= m:
            total += p ** sum(pattern) * (1 - p) ** (k + m - sum(pattern))
    assert mds_success(p, k, m) == pytest.approx(total)


def test_xor_matches_paper_formula_and_enumeration() -> None:
    k, m, p = 6, 2, 0.2
    n = k // m + 1
    paper = ((1 - p) ** n + n * p * (1 - p) ** (n - 1)) ** m
    assert xor_success(p, k, m) == pytest.approx(paper)
    total = 0.0
    for data in itertools.product((0, 1), repeat=k):
        for parity in itertools.product((0, 1), repeat=m):
            groups = [parity[i] + sum(data[j] for j in range(k) if j % m == i) for i in range(m)]
            if max(groups) <= 1:
                lost = sum(data) + sum(parity)
                total += p**lost * (1 - p) ** (k + m - lost)
    assert xor_success(p, k, m) == pytest.approx(total)


def test_partial_submessage_layout() -> None:
    layout = ECLayout(num_chunks=70, k=32, m=8)
    assert layout.full_submessages == 2 and layout.tail_data == 6
    assert layout.tail_parity == 2  # ceil(6 * 8 / 32)
    assert layout.parity_chunks == math.ceil(70 / (32 / 8))
    assert layout.submessages == 3
    p = 0.05
    q_full = 1 - mds_success(p, 32, 8)
    q_tail = 1 - mds_success(p, 6, 2)
    assert layout.fallback_probability(p, "mds") == pytest.approx(
        1 - (1 - q_full) ** 2 * (1 - q_tail)
    )
    chunks, probs = retransmit_distribution(layout, p, "mds")
    assert probs.sum() == pytest.approx(1.0)
    assert set(chunks) <= {0, 6, 32, 38, 64, 70}
    assert np.dot(chunks, probs) == pytest.approx(layout.expected_retransmit_chunks(p, "mds"))


def test_fallback_probability_formula() -> None:
    size = 32 * 2**20  # 512 chunks = 16 full submessages of 32
    spec = SchemeSpec("ec-xor", k=32, m=8)
    p = 0.01
    expected = 1 - xor_success(p, 32, 8) ** 16
    assert analytic.ec_fallback_probability(LINK, size, p, spec) == pytest.approx(expected)


def test_ec_bound_is_the_paper_formula() -> None:
    size, p = 64 * 2**20, 0.02
    spec = SchemeSpec("ec-mds", k=32, m=8)
    m_chunks = 1024
    t = LINK.t_inj_s
    q = stats.binom.sf(8, 40, p)
    p_fb = 1 - (1 - q) ** 32
    x = 32 * q * 32  # E[failures] * k
    o = 3 * 0.025 + t
    lo = math.floor(x)
    sr_lo = 0.025 + (max_delay_mean(lo, p, t, o) if lo else 0.0)
    sr_hi = 0.025 + max_delay_mean(lo + 1, p, t, o)
    sr = sr_lo + (x - lo) * (sr_hi - sr_lo)
    expected = (m_chunks + 256) * t + p_fb * (0.025 + 1.0 * 0.025) + sr
    assert analytic.ec_mean_bound(LINK, size, p, spec) == pytest.approx(expected)
    # the exact mixture mean and the bound agree closely when fallbacks are rare
    assert analytic.ec_mean(LINK, size, p, spec) == pytest.approx(expected, rel=0.01)


def test_ec_cdf_and_quantile_are_consistent() -> None:
    size, p = 8 * 2**20, 0.1
    spec = SchemeSpec("ec-xor")
    q = analytic.ec_quantile(0.999, LINK, size, p, spec)
    assert analytic.ec_cdf(q, LINK, size, p, spec)[0] >= 0.999
    assert analytic.ec_cdf(q - 1e-6, LINK, size, p, spec)[0] < 0.999
    grid = np.linspace(0.02, 1.0, 50)
    cdf = analytic.ec_cdf(grid, LINK, size, p, spec)
    assert np.all(np.diff(cdf) >= -1e-12) and cdf[-1] == pytest.approx(1.0)


def test_sr_nack_beats_sr_rto() -> None:
    size, p = 8 * 2**20, 1e-2
    rto = analytic.sr_mean(LINK, size, p, SchemeSpec("sr-rto"))
    nack = analytic.sr_mean(LINK, size, p, SchemeSpec("sr-nack"))
    assert nack < rto
    # at most the ratio of the timeouts (plus T_INJ)
    assert (rto - LINK.ideal_time_s(size)) / (nack - LINK.ideal_time_s(size)) < 3.01
