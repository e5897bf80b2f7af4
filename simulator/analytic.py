"""Analytic completion times of SR and EC writes: means, exact CDFs and quantiles.

All functions take a per-CHUNK i.i.d. loss probability ``p`` (convert a per-packet rate
with :meth:`sdr.simulator.link.Link.chunk_drop`).

SR: ``T_SR = max_i X_i + RTT`` (see :mod:`sdr.simulator.sr_model`).

EC: all ``M + ceil(M/R)`` data and parity chunks are injected back to back (``base``). If
every submessage decodes the write completes at ``base + RTT``. Otherwise the receiver's
fallback timer expires, it NACKs, and ``n`` data chunks are resent with SR:
``base + RTT + beta*RTT + T_SR(n)``. Which chunks is ``spec.fallback``: ``"protocol"`` (the
default) resends the missing data chunks of the failed submessages, as the SDK does, and a
submessage is done once it is recoverable again (:mod:`sdr.simulator.ec_repair`: the
fallback then costs ``beta*RTT + RTT + n*T_INJ + O*max_s R_s``); ``"paper"`` resends every
data chunk of a failed submessage (``k`` each) and waits for all of them. With
``T_SR(0) = RTT`` and ``"paper"`` this is exactly the paper's bound ``(M + ceil(M/R))*T_INJ
+ P_fb*(RTT + beta*RTT) + E[T_SR(E[failures]*k)]`` when the number of failures is replaced
by its mean; :func:`ec_mean` instead averages over the exact distribution of ``n``, and
:func:`ec_mean_bound` gives the paper's formula (whatever ``spec.fallback`` says).
"""

from __future__ import annotations

import math

import numpy as np

from sdr.simulator.ec_model import ECLayout, resend_distribution
from sdr.simulator.ec_repair import message_repair, repair_cdf, repair_mean
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec
from sdr.simulator.sr_model import (
    max_delay_cdf,
    max_delay_mean,
    max_delay_quantile,
)

__all__ = [
    "sr_mean",
    "sr_cdf",
    "sr_quantile",
    "retry_cost_s",
    "ec_parts",
    "ec_layout",
    "ec_mean",
    "ec_mean_bound",
    "ec_cdf",
    "ec_quantile",
    "ec_fallback_probability",
    "scheme_mean",
    "scheme_quantile",
]


def retry_cost_s(link: Link, spec: SchemeSpec) -> float:
    """O = RTO + T_INJ (a NACK's RTT + T_INJ for sr-nack): what each loss of a chunk adds
    to its completion."""
    return link.rto_s(spec.retry_rtts(link)) + link.t_inj_s


def sr_mean(link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """E[T_SR] in seconds for a write of ``size`` bytes (tail integral of the product CDF)."""
    n = link.num_chunks(size)
    return max_delay_mean(n, p, link.t_inj_s, retry_cost_s(link, spec)) + link.rtt


def sr_cdf(t: float | np.ndarray, link: Link, size: int, p: float, spec: SchemeSpec) -> np.ndarray:
    """Exact P(T_SR <= t)."""
    n = link.num_chunks(size)
    return max_delay_cdf(np.asarray(t) - link.rtt, n, p, link.t_inj_s, retry_cost_s(link, spec))


def sr_quantile(q: float, link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """Exact q-quantile of T_SR in seconds."""
    n = link.num_chunks(size)
    return max_delay_quantile(q, n, p, link.t_inj_s, retry_cost_s(link, spec)) + link.rtt


def ec_layout(link: Link, size: int, spec: SchemeSpec) -> ECLayout:
    """The submessage layout of a ``size``-byte write under ``spec``."""
    return ECLayout(link.num_chunks(size), spec.k, spec.m)


def ec_parts(link: Link, size: int, spec: SchemeSpec) -> tuple[float, float, ECLayout]:
    """(lossless completion time, extra delay of a fallback before SR's chunks, layout)."""
    layout = ec_layout(link, size, spec)
    lossless = layout.total_chunks * link.t_inj_s + link.rtt
    # fallback: the timer fires beta*RTT late, then SR resends (its own RTT is in lossless)
    penalty = (1.0 + link.beta) * link.rtt
    return lossless, penalty, layout


def ec_fallback_probability(link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """P(at least one submessage is not recoverable), ``1 - P_EC^L``."""
    return ec_layout(link, size, spec).fallback_probability(p, spec.code)


def ec_mean(link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """E[T_EC] averaged over the exact distribution of the chunks the fallback resends."""
    lossless, extra, layout = ec_parts(link, size, spec)
    o = retry_cost_s(link, spec)
    if spec.fallback == "protocol":
        n, table = message_repair(layout, p, spec.code)
        return float(lossless + repair_mean(n, table, link.t_inj_s, o, extra))
    chunks, probs = resend_distribution(layout, p, spec.code, spec.fallback)
    total = lossless
    limit = 50_000 // max(len(chunks), 1)  # share one exact-sum budget across the mixture
    for n, w in zip(chunks, probs, strict=True):
        if n > 0:
            total += w * (extra + max_delay_mean(int(n), p, link.t_inj_s, o, limit))
    return float(total)


def _sr_mean_interpolated(link: Link, x: float, p: float, o: float) -> float:
    """E[T_SR(x)] for a fractional chunk count: linear between floor and ceil; T_SR(0) = RTT."""

    def whole(n: int) -> float:
        return link.rtt + (max_delay_mean(n, p, link.t_inj_s, o) if n > 0 else 0.0)

    lo = math.floor(x)
    frac = x - lo
    return (1 - frac) * whole(lo) + (frac * whole(lo + 1) if frac > 0 else 0.0)


def ec_mean_bound(link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """The paper's lower bound on E[T_EC]:

    ``(M + ceil(M/R))*T_INJ + P_fallback*(RTT + beta*RTT) + E[T_SR(E[failures]*k)]``
    (always the paper's fallback, whole submessages, whatever ``spec.fallback`` says).
    """
    layout = ec_layout(link, size, spec)
    base = layout.total_chunks * link.t_inj_s
    p_fb = layout.fallback_probability(p, spec.code)
    x = layout.expected_retransmit_chunks(p, spec.code)
    sr_part = _sr_mean_interpolated(link, x, p, retry_cost_s(link, spec))
    return float(base + p_fb * (link.rtt + link.beta * link.rtt) + sr_part)


def _mixture_cdf(
    s: np.ndarray, chunks: np.ndarray, probs: np.ndarray, p: float, t: float, o: float
):
    """sum_n P(n) * P(max X(n) <= s), vectorized over n; s is 1-D."""
    cdf = np.zeros(s.size)
    for n, prob in zip(chunks.astype(int), probs, strict=True):  # memory linear in the levels
        cdf += prob * max_delay_cdf(s, int(n), p, t, o)
    return cdf


def ec_cdf(t: float | np.ndarray, link: Link, size: int, p: float, spec: SchemeSpec) -> np.ndarray:
    """Exact P(T_EC <= t) under the model (a mixture over the fallback's resends)."""
    return _ec_cdf_function(link, size, p, spec)(np.atleast_1d(np.asarray(t, dtype=float)))


def _ec_cdf_function(link: Link, size: int, p: float, spec: SchemeSpec):
    """``t -> P(T_EC <= t)`` with the fallback's law computed once (for bisection)."""
    lossless, extra, layout = ec_parts(link, size, spec)
    o = retry_cost_s(link, spec)
    if spec.fallback == "protocol":
        n, table = message_repair(layout, p, spec.code)
        clean = float(table[-1][n == 0].sum())

        def protocol_cdf(t: np.ndarray) -> np.ndarray:
            rest = repair_cdf(t - lossless, n, table, link.t_inj_s, o, extra)
            return np.where(t >= lossless, clean, 0.0) + rest

        return protocol_cdf
    chunks, probs = resend_distribution(layout, p, spec.code, spec.fallback)

    def paper_cdf(t: np.ndarray) -> np.ndarray:
        out = np.where(t >= lossless, probs[chunks == 0].sum(), 0.0)
        retry = chunks > 0
        if retry.any():
            s = t - lossless - extra
            out = out + _mixture_cdf(s, chunks[retry], probs[retry], p, link.t_inj_s, o)
        return out

    return paper_cdf


def ec_quantile(q: float, link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """Exact q-quantile of T_EC under the model, by bisection on :func:`ec_cdf`."""
    lossless, extra, layout = ec_parts(link, size, spec)
    cdf = _ec_cdf_function(link, size, p, spec)
    lo = lossless
    if cdf(np.array([lo]))[0] >= q:
        return lo
    o = retry_cost_s(link, spec)
    if spec.fallback == "protocol":
        n, table = message_repair(layout, p, spec.code)
        hi = lossless + extra + int(n.max()) * link.t_inj_s + table.shape[0] * o
    else:
        chunks, _ = resend_distribution(layout, p, spec.code, spec.fallback)
        q_hi = 1.0 - (1.0 - q) / 10.0
        hi = lossless + extra + max_delay_quantile(q_hi, int(chunks.max()), p, link.t_inj_s, o)
    tol = link.t_inj_s * 1e-3
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if cdf(np.array([mid]))[0] >= q:
            hi = mid
        else:
            lo = mid
    return hi


def scheme_mean(link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """Analytic mean completion time of ``spec`` (exact failure mixture for EC)."""
    return ec_mean(link, size, p, spec) if spec.is_ec else sr_mean(link, size, p, spec)


def scheme_quantile(q: float, link: Link, size: int, p: float, spec: SchemeSpec) -> float:
    """Exact q-quantile of the completion time of ``spec``."""
    if spec.is_ec:
        return ec_quantile(q, link, size, p, spec)
    return sr_quantile(q, link, size, p, spec)
