"""Property tests of the exact SR model, the EC layout and the package's import boundary."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sdr.simulator.ec_model import ECLayout
from sdr.simulator.schemes import parse_ec
from sdr.simulator.sr_model import max_delay_cdf, max_delay_mean, max_delay_quantile

SIMULATOR = Path(__file__).resolve().parents[1] / "simulator"

chunks = st.integers(min_value=1, max_value=5000)
drops = st.floats(min_value=1e-6, max_value=0.5)
inj = st.floats(min_value=1e-7, max_value=1e-3)
ratio = st.floats(min_value=1.0, max_value=1e5)  # O / T


@settings(max_examples=60, deadline=None)
@given(n=chunks, p=drops, t=inj, r=ratio, q=st.sampled_from([0.5, 0.9, 0.99, 0.999]))
def test_quantile_defines_the_cdf_step(n: int, p: float, t: float, r: float, q: float) -> None:
    o = t * r
    x = max_delay_quantile(q, n, p, t, o)
    assert x >= n * t * (1 - 1e-12)
    assert max_delay_cdf(x, n, p, t, o)[0] >= q
    if x > n * t * (1 + 1e-9):
        assert max_delay_cdf(x - t * 0.01, n, p, t, o)[0] < q


@settings(max_examples=60, deadline=None)
@given(n=chunks, p=drops, t=inj, r=ratio)
def test_cdf_monotone_and_mean_bounded(n: int, p: float, t: float, r: float) -> None:
    o = t * r
    grid = n * t + np.linspace(0, 40 * o, 200)
    cdf = max_delay_cdf(grid, n, p, t, o)
    assert np.all(np.diff(cdf) >= -1e-12)
    assert cdf.min() >= 0.0 and cdf.max() <= 1.0 + 1e-12
    mean = max_delay_mean(n, p, t, o)
    assert mean >= n * t * (1 - 1e-12)
    # each chunk alone has E = i*T + O*p/(1-p); the max is at least the last chunk's
    assert mean >= n * t + o * p / (1 - p) * (1 - 1e-3) - t


def test_cdf_never_exceeds_one_where_the_level_sum_rounds_up() -> None:
    """A case hypothesis found under load: the log-domain sum rounded to +1.1e-12, so the
    CDF read 1.0000000000011 (a probability above 1)."""
    n, p, t = 3044, 0.4020417250847059, 0.001
    cdf = max_delay_cdf(n * t + np.linspace(0, 40 * t, 200), n, p, t, t)
    assert cdf.max() <= 1.0 and cdf[-1] == 1.0


@given(m_chunks=st.integers(1, 100_000), k=st.integers(1, 128), m=st.integers(1, 64))
def test_layout_parity_is_ceil_m_over_r(m_chunks: int, k: int, m: int) -> None:
    layout = ECLayout(m_chunks, k, m)
    assert layout.parity_chunks == math.ceil(m_chunks * m / k)
    assert layout.full_submessages * k + layout.tail_data == m_chunks
    assert layout.tail_parity <= m


@given(k=st.integers(1, 10**6), m=st.integers(1, 10**6))
def test_parse_ec_round_trip(k: int, m: int) -> None:
    assert parse_ec(f"{k},{m}") == (k, m)


def test_simulator_imports_only_the_core() -> None:
    for path in SIMULATOR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in ("backends", "sdr.cli", "experiments"), f"{path.name}: {name}"
