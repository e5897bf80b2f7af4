"""Analytic Selective Repeat completion time (paper section 4.2).

Chunk ``i`` (1-based, ``i = 1..n``) finishes its first injection at ``i * T`` (``T = T_INJ``);
every loss costs ``O = RTO + T``. With ``Z_i = Y_i - 1`` lost attempts, ``Y_i ~ Geometric(1-p)``,
the last copy leaves at ``X_i = i*T + O*Z_i`` and

    T_SR = max_i X_i + RTT.

Chunks are numbered from 1 so that a lossless write takes ``M*T_INJ + RTT``, the ideal time.

The CDF is the paper's product formula, evaluated exactly:
``P(max X <= s) = prod_i P(Z_i <= floor((s - i*T)/O)) = prod_i (1 - p^(j_i(s)+1))``. Grouping
chunks by ``j`` makes one evaluation cost O(retry levels), not O(n). The mean is the tail
integral of the same product; inside a chunk step we count chunks continuously (midpoint
rule), which makes the log-CDF piecewise linear and the integral closed-form; the error is
far below one ``T_INJ`` per retry level (checked against the discrete sum in the tests).
Small cases (up to 50,000 lattice points ``i*T + j*O``) are summed exactly instead.
"""

from __future__ import annotations

import math

import numpy as np

from sdr.errors import ConfigError

__all__ = [
    "MAX_RETRY_LEVELS",
    "level_weights",
    "retry_levels",
    "max_delay_cdf",
    "max_delay_mean",
    "max_delay_quantile",
]

# Retry levels whose total probability mass n * p^j falls below this are ignored.
_NEGLIGIBLE = 1e-17
_EPS = 1e-9
#: retry levels the model evaluates at most (memory and time are linear in them)
MAX_RETRY_LEVELS = 1_000_000
# Matrix entries per block when the CDF counts the chunks of the partly-sent levels.
_BLOCK = 1 << 20
# Up to this many lattice points the mean is summed exactly; beyond, the closed form is used.
_EXACT_MEAN_POINTS = 50_000


def _check(n: int, p: float, t: float, o: float) -> None:
    if n < 0:
        raise ConfigError(f"number of chunks must be >= 0, got {n!r}")
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"chunk drop probability must be in [0, 1), got {p!r}")
    if not (t > 0 and o > 0):
        raise ConfigError(f"T_INJ and O must be > 0 s, got {t!r} and {o!r}")


def retry_levels(
    n: int, p: float, limit: int = MAX_RETRY_LEVELS, model: str = "the SR model"
) -> int:
    """Number of retry levels J that matter: the smallest J with ``n * p^(J+1)`` negligible.

    ConfigError past ``limit`` (:data:`MAX_RETRY_LEVELS`: a chunk drop probability so close
    to 1 that a chunk needs about a million sends): a model's memory and time grow with J.
    The EC repair model counts its resend rounds with it too, under its own limit.
    """
    if p <= 0.0 or n <= 0:
        return 0
    if not p < 1.0:
        raise ConfigError(f"chunk drop probability must be in [0, 1), got {p!r}")
    j = max(1, math.ceil((math.log(_NEGLIGIBLE) - math.log(n)) / math.log(p)))
    if j > limit:
        raise ConfigError(
            f"chunk drop probability {p:.6g} is too close to 1 for {model}: a chunk needs "
            f"about {1 / (1 - p):.3g} sends on average and {j:,} retry levels matter, more "
            f"than the {limit:,} it evaluates; use smaller chunks"
        )
    return j


def _prefix(values: np.ndarray) -> np.ndarray:
    """``out[k] = values[0] + ... + values[k-1]`` (``out[0] = 0``)."""
    return np.concatenate(([0.0], np.cumsum(values)))


def level_weights(p: float, levels: int) -> np.ndarray:
    """``d_j = log(1 - p^(j+1)) - log(1 - p^j)`` for ``j = 1..levels``."""
    j = np.arange(1, levels + 1, dtype=float)
    return np.log1p(-(p ** (j + 1))) - np.log1p(-(p**j))


def max_delay_cdf(s: float | np.ndarray, n: int, p: float, t: float, o: float) -> np.ndarray:
    """Exact ``P(max_i X_i <= s)`` for ``n`` chunks (the product formula).

    Args:
        s: time(s) in seconds since the first chunk started.
        n: chunks; p: per-chunk loss probability; t: T_INJ; o: RTO + T_INJ.
    """
    _check(n, p, t, o)
    s = np.atleast_1d(np.asarray(s, dtype=float))
    if n == 0:
        return (s >= 0).astype(float)
    all_sent = s >= n * t * (1 - _EPS)
    levels = retry_levels(n, p)
    base = n * math.log1p(-p)
    log_cdf = base + _level_sum(s, n, p, t, o, levels) if levels else np.full(s.shape, base)
    # the level sum cancels ``base`` exactly in the limit; rounding can leave it a hair
    # above 0 (found: 1.1e-12 at n=3044, p=0.402), and a probability is at most 1
    return np.where(all_sent, np.exp(np.minimum(log_cdf, 0.0)), 0.0)


def _level_sum(
    s: np.ndarray, n: int, p: float, t: float, o: float, levels: int, continuous: bool = False
) -> np.ndarray:
    """``sum_j d_j * count_j(s)`` with ``count_j = clip(floor((s - j*O)/T), 0, n)`` (or, if
    ``continuous``, ``clip((s - j*O)/T - 1/2, 0, n)``), in memory linear in the levels:
    levels whose chunks are all sent by ``s`` come from a prefix sum, and only the band of
    partly-sent ones (about ``n*T/O`` wide) is counted, block by block."""
    d = level_weights(p, levels)
    total_d = _prefix(d)
    # levels <= full are all sent, levels > some none (one level of slack either side)
    full = np.clip(np.floor((s - n * t) / o) - 1, 0, levels).astype(np.int64)
    some = np.clip(np.floor(s / o) + 1, 0, levels).astype(np.int64)
    some = np.maximum(some, full)
    out = n * total_d[full]
    width = int((some - full).max()) if s.size else 0
    if width:
        offsets = np.arange(1, width + 1)
        rows = max(1, _BLOCK // width)
        for a in range(0, s.size, rows):
            j = full[a : a + rows, None] + offsets[None, :]
            inside = j <= some[a : a + rows, None]
            j = np.where(inside, j, 1)
            x = (s[a : a + rows, None] - j * o) / t
            counts = np.clip(x - 0.5 if continuous else np.floor(x + _EPS), 0, n)
            out[a : a + rows] += np.sum(np.where(inside, counts * d[j - 1], 0.0), axis=1)
    return out


def _continuous_log_cdf(s: np.ndarray, n: int, p: float, t: float, o: float, levels: int):
    """The log-CDF with the chunks of a level counted continuously (the mean's midpoint rule)."""
    return n * math.log1p(-p) + _level_sum(s, n, p, t, o, levels, continuous=True)


def _lattice_mean(n: int, p: float, t: float, o: float, levels: int) -> float:
    """Exact ``E[max X]``: the CDF is constant between lattice points ``i*T + j*O``."""
    i = np.arange(1, n + 1, dtype=float)
    j = np.arange(0, levels + 2, dtype=float)
    points = np.unique((i[:, None] * t + j[None, :] * o).ravel())
    points = points[points >= n * t * (1 - _EPS)]
    survival = 1.0 - max_delay_cdf(points, n, p, t, o)
    return float(points[0] + np.sum(survival[:-1] * np.diff(points)))


def max_delay_mean(
    n: int, p: float, t: float, o: float, exact_limit: int = _EXACT_MEAN_POINTS
) -> float:
    """``E[max_i X_i]``: ``n*T`` plus the integral of the survival function beyond it.

    Summed exactly over the lattice when it has at most ``exact_limit`` points, else by
    the closed-form integral (relative error ~1e-4 or less at such sizes).
    """
    _check(n, p, t, o)
    if n == 0:
        return 0.0
    start = n * t
    levels = retry_levels(n, p)
    if levels == 0:
        return start
    if n * levels <= exact_limit:
        return _lattice_mean(n, p, t, o, levels)
    j = np.arange(1, levels + 1, dtype=float)
    kinks = np.concatenate((j * o + 0.5 * t, j * o + (n + 0.5) * t))
    points = np.unique(np.concatenate(([start], kinks[kinks > start])))
    log_f = _continuous_log_cdf(points, n, p, t, o, levels)
    width = np.diff(points)
    la, lb = log_f[:-1], log_f[1:]
    delta = lb - la
    # integral over a piece of 1 - exp(la + (lb - la) x / w)
    big = np.abs(delta) > 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_cdf = np.where(
            big, (np.exp(lb) - np.exp(la)) / np.where(big, delta, 1.0), np.exp(la) * (1 + delta / 2)
        )
    survival_integral = width * (1.0 - mean_cdf)
    return float(start + survival_integral.sum())


def max_delay_quantile(q: float, n: int, p: float, t: float, o: float) -> float:
    """Exact ``q``-quantile of ``max_i X_i``: the smallest ``s`` with ``CDF(s) >= q``.

    The CDF is a step function (jumps at ``i*T + j*O``), so quantiles are found by bisection
    to well below one ``T_INJ`` and are not subject to sampling noise.
    """
    _check(n, p, t, o)
    if not 0.0 < q < 1.0:
        raise ConfigError(f"quantile must be in (0, 1), got {q!r}")
    if n == 0:
        return 0.0
    lo = n * t
    if max_delay_cdf(lo, n, p, t, o)[0] >= q:
        return lo
    # F(n*T + j*O) = (1 - p^(j+1))^n: find the first level whose saturation reaches q.
    # (1 - p^(j+1))^n >= q  <=>  p^(j+1) <= 1 - q^(1/n)
    j = max(1, math.ceil(math.log(-math.expm1(math.log(q) / n)) / math.log(p)) - 1)
    while -math.expm1(n * math.log1p(-(p ** (j + 1)))) > 1.0 - q:  # rounding: a level more
        j += 1
    hi = n * t + j * o
    tol = t * 1e-3
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if max_delay_cdf(mid, n, p, t, o)[0] >= q:
            hi = mid
        else:
            lo = mid
    return hi
