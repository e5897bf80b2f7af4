"""Summary statistics of completion-time samples, with confidence intervals for quantiles.

Tail quantiles of T_SR are step functions of the number of retransmission rounds, so a
sampled p99.9 can jump by a whole RTO between seeds. Each sampled quantile therefore comes
with a distribution-free confidence interval from order statistics, computed by SciPy's
:func:`scipy.stats.quantile_test` (``confidence_interval``): the rank of the true
q-quantile among ``n`` sorted samples is Binomial(n, q). Where the samples are too few for
a bound at the requested confidence (e.g. the upper bound of a p99.9 from fewer than ~3,700
samples), that bound is *open* and reported as ``-inf`` / ``+inf``, never as the sample
min or max; :func:`ci_is_open` tests for it.

The mean's interval is the normal one, from the sample standard deviation. Where that
cannot be estimated (one sample, or all samples equal: a zero spread says nothing about
the spread of the model) the interval is open, ``(-inf, +inf)``, as an open quantile
bound is, never the zero-width ``[x, x]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from sdr.errors import ConfigError

__all__ = ["QUANTILES", "SampleSummary", "ci_is_open", "quantile_ci", "summarize"]

#: Quantiles every report carries: name -> level.
QUANTILES = {"p50": 0.5, "p99": 0.99, "p999": 0.999}


def quantile_ci(
    sorted_samples: np.ndarray, q: float, confidence: float = 0.95
) -> tuple[float, float]:
    """Distribution-free two-sided ``confidence`` interval for the ``q``-quantile.

    Computed with :func:`scipy.stats.quantile_test` (its ``confidence_interval``), which
    picks order statistics at Binomial(n, q) ranks. A bound the samples cannot give at this
    confidence (too few samples beyond the quantile) is open: ``-inf`` for the lower bound,
    ``+inf`` for the upper one (SciPy reports it as NaN).
    """
    x = np.asarray(sorted_samples, dtype=float)
    if x.size == 0:
        raise ConfigError("cannot compute a confidence interval from no samples")
    ci = stats.quantile_test(x, q=float(x[0]), p=q).confidence_interval(confidence)
    lo = float(ci.low) if np.isfinite(ci.low) else -math.inf
    hi = float(ci.high) if np.isfinite(ci.high) else math.inf
    return lo, hi


def ci_is_open(ci: tuple[float, float] | list[float | None] | None) -> bool:
    """True if either bound of ``ci`` is open (infinite, NaN or ``None`` as in JSON)."""
    if ci is None:
        return False
    return any(b is None or not math.isfinite(b) for b in ci)


@dataclass(frozen=True)
class SampleSummary:
    """Mean, quantiles and 95% confidence intervals of a set of samples (seconds).

    A quantile interval bound that ``count`` samples cannot give is ``-inf`` / ``+inf``.
    """

    count: int
    mean: float
    mean_ci: tuple[float, float]
    quantiles: dict[str, float]
    quantile_cis: dict[str, tuple[float, float]]

    def estimate_fields(self) -> dict[str, Any]:
        """The sampled fields of an ``Estimate``: mean, p50/p99/p99.9 and their CIs."""
        out: dict[str, Any] = {"mean_s": self.mean, "mean_ci_s": self.mean_ci}
        for name in ("p50", "p99", "p999"):
            out[f"{name}_s"] = self.quantiles[name]
            out[f"{name}_ci_s"] = self.quantile_cis[name]
        return out


def summarize(samples: np.ndarray, confidence: float = 0.95) -> SampleSummary:
    """Summarize completion-time samples: mean (with a normal CI) and :data:`QUANTILES`.

    The mean's CI is ``(-inf, +inf)`` (open) when it cannot be computed: fewer than two
    samples or all of them equal.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n == 0:
        raise ConfigError("cannot summarize an empty sample")
    mean = float(x.mean())
    if n > 1 and x[0] != x[-1]:
        half = float(stats.norm.ppf(0.5 + confidence / 2) * x.std(ddof=1) / np.sqrt(n))
    else:  # no spread to estimate the mean's error from: the interval cannot be computed
        half = math.inf
    qs = {name: float(np.quantile(x, q, method="inverted_cdf")) for name, q in QUANTILES.items()}
    cis = {name: quantile_ci(x, q, confidence) for name, q in QUANTILES.items()}
    return SampleSummary(n, mean, (mean - half, mean + half), qs, cis)
