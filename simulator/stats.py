"""Summary statistics of completion-time samples, with confidence intervals for quantiles.

Tail quantiles of T_SR are step functions of the number of retransmission rounds, so a
sampled p99.9 can jump by a whole RTO between seeds. Each sampled quantile therefore comes
with a distribution-free confidence interval from order statistics: the rank of the true
q-quantile among ``n`` sorted samples is Binomial(n, q).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from sdr.errors import ConfigError

__all__ = ["QUANTILES", "SampleSummary", "quantile_ci", "summarize"]

#: Quantiles every report carries: name -> level.
QUANTILES = {"p50": 0.5, "p99": 0.99, "p999": 0.999}


def quantile_ci(
    sorted_samples: np.ndarray, q: float, confidence: float = 0.95
) -> tuple[float, float]:
    """Distribution-free ``confidence`` interval for the ``q``-quantile.

    Uses the order statistics at the Binomial(n, q) ``(1 -/+ confidence) / 2`` ranks; at the
    edges (too few samples for the tail) the interval is open to the sample min or max.
    """
    n = sorted_samples.size
    if n == 0:
        raise ConfigError("cannot compute a confidence interval from no samples")
    tail = (1.0 - confidence) / 2.0
    lo_rank = int(stats.binom.ppf(tail, n, q))  # number of samples below the lower bound
    hi_rank = int(stats.binom.ppf(1.0 - tail, n, q)) + 1
    lo = sorted_samples[max(lo_rank - 1, 0)]
    hi = sorted_samples[min(hi_rank - 1, n - 1)]
    return float(lo), float(hi)


@dataclass(frozen=True)
class SampleSummary:
    """Mean, quantiles and 95% confidence intervals of a set of samples (seconds)."""

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
    """Summarize completion-time samples: mean (with a normal CI) and :data:`QUANTILES`."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n == 0:
        raise ConfigError("cannot summarize an empty sample")
    mean = float(x.mean())
    half = (
        float(stats.norm.ppf(0.5 + confidence / 2) * x.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    )
    qs = {name: float(np.quantile(x, q, method="inverted_cdf")) for name, q in QUANTILES.items()}
    cis = {name: quantile_ci(x, q, confidence) for name, q in QUANTILES.items()}
    return SampleSummary(n, mean, (mean - half, mean + half), qs, cis)
