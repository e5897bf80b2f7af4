"""Sampled quantiles are not shown as more certain than the samples make them (issue 20.10).

A p99.9 from 20 (or 1000) samples cannot be bounded from above at 95%: the interval's upper
bound is open (``inf``; ``null`` in JSON), the ``sdr sim`` table says ``>= lo`` and
``too few samples: n=...`` instead of ``lo .. lo``, and shows the exact analytic p99.9.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from sdr.simulator.stats import quantile_ci, summarize
from sdr.simulator.sweep import make_grid, run_point

ROOT = Path(__file__).resolve().parents[1]
SDR = str(Path(sys.executable).with_name("sdr"))
SIM_20 = [
    *("sim", "--scheme", "sr-rto", "--size", "8MiB", "--rtt", "25ms", "--drop", "1e-3"),
    *("--method", "montecarlo", "--samples", "20"),
]


def _sdr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SDR, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )


def test_quantile_ci_is_scipy_quantile_test() -> None:
    x = np.sort(np.random.default_rng(4).exponential(size=5000))
    for q in (0.5, 0.99, 0.999):
        ci = stats.quantile_test(x, q=1.0, p=q).confidence_interval(0.95)
        assert quantile_ci(x, q) == (float(ci.low), float(ci.high))


def test_too_few_samples_give_an_open_bound_not_the_sample_max() -> None:
    from sdr.simulator.stats import ci_is_open

    lo, hi = quantile_ci(np.full(20, 0.1275), 0.999)
    assert (lo, hi) == (0.1275, math.inf)
    assert ci_is_open((lo, hi)) and ci_is_open([lo, None]) and not ci_is_open((1.0, 2.0))
    assert quantile_ci(np.arange(3.0), 0.5) == (-math.inf, math.inf)
    # 1000 samples cannot bound a p99.9 from above either (0.999**1000 > 0.025) ...
    assert summarize(np.full(1000, 0.025)).quantile_cis["p999"] == (0.025, math.inf)
    # ... but 10,000 can
    assert all(math.isfinite(b) for b in summarize(np.arange(10_000.0)).quantile_cis["p999"])


def test_sweep_row_has_an_open_upper_bound_beside_the_exact_p999() -> None:
    (point,) = make_grid([128 << 10], [1e-2], ["sr-rto"], rtts=[0.025], samples=1000, seed=0)
    row = run_point(point)
    assert row["p999_ci_hi_s"] == math.inf
    assert row["p999_ci_lo_s"] <= row["analytic_p999_s"]


def test_sim_table_says_too_few_samples() -> None:
    result = _sdr(*SIM_20)
    assert result.returncode == 0, result.stderr
    p999 = next(line for line in result.stdout.splitlines() if "│ p999 " in line)
    assert ">= " in p999 and "too few samples: n=20" in p999
    assert " .. " not in p999
    assert "p999, exact (analytic)" in result.stdout


def test_sim_json_open_bound_is_null() -> None:
    result = _sdr(*SIM_20, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    lo, hi = out["p999_ci_s"]
    assert hi is None and lo == pytest.approx(out["p999_s"])
    assert out["analytic_p999_s"] >= lo


def test_analytic_table_marks_quantiles_exact() -> None:
    result = _sdr(*SIM_20[:-4])
    assert result.returncode == 0, result.stderr
    p999 = next(line for line in result.stdout.splitlines() if "│ p999 " in line)
    assert "exact" in p999 and "too few" not in p999
