"""Erasure-coding layout and recovery probabilities (paper section 4, appendices).

A message of ``M`` chunks is split into submessages of ``k`` data chunks, each followed by
``m`` parity chunks. When ``k`` does not divide ``M`` the last submessage holds the
remaining ``r = M mod k`` data chunks and ``ceil(r * m / k)`` parity chunks, so the parity
total is exactly ``ceil(M / R)`` with ``R = k / m`` (the paper's formula) and the code rate
of the partial submessage is as close to ``k/m`` as whole chunks allow.

Codes:

* MDS (Reed-Solomon): a submessage of ``k + m`` chunks survives up to ``m`` losses.
* XOR: parity ``i`` is the XOR of data chunks ``j`` with ``j mod m = i``; each group of
  ``g`` data chunks plus its parity survives one loss. With ``n = k/m + 1`` this is the
  paper's ``[(1-p)^n + n p (1-p)^(n-1)]^m``.

Fallback (what the SR repair resends when a submessage cannot be decoded):

* ``"protocol"`` (the default): what the SDK does (``sdr.reliability.erasure_coding``: the
  EC_NACK lists, per failed submessage, its *missing* data chunks, and only those are
  resent). :func:`failed_missing_distribution` gives, per submessage, the joint law of
  "it fails" and "d of its data chunks are missing".
* ``"paper"``: the paper's formula, every data chunk of a failed submessage (``k``) is
  resent. The paper figures use it (``SchemeSpec(..., fallback="paper")``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from sdr.errors import ConfigError

__all__ = [
    "Code",
    "FALLBACKS",
    "ECLayout",
    "Fallback",
    "check_fallback",
    "failed_missing_distribution",
    "resend_distribution",
    "mds_failure",
    "mds_success",
    "xor_failure",
    "xor_success",
    "xor_group_sizes",
    "submessage_failure",
    "submessage_success",
    "retransmit_distribution",
]

Code = Literal["mds", "xor"]
Fallback = Literal["protocol", "paper"]
FALLBACKS: tuple[str, ...] = ("protocol", "paper")


def _check_code(k: int, m: int) -> None:
    if k < 1 or m < 1:
        raise ConfigError(f"EC needs k >= 1 data and m >= 1 parity chunks, got k={k}, m={m}")


def check_fallback(fallback: str) -> None:
    """ConfigError unless ``fallback`` is a known fallback model."""
    if fallback not in FALLBACKS:
        raise ConfigError(
            f"EC fallback model must be one of {', '.join(FALLBACKS)}, got {fallback!r}"
        )


def mds_failure(p: float, k: int, m: int) -> float:
    """P(an MDS submessage of k data + m parity chunks is lost) = P(more than m of k+m lost)."""
    _check_code(k, m)
    return float(stats.binom.sf(m, k + m, p))


def mds_success(p: float, k: int, m: int) -> float:
    """P(an MDS submessage of k data + m parity chunks decodes) = P(at most m of k+m lost)."""
    return 1.0 - mds_failure(p, k, m)


def xor_group_sizes(k: int, m: int) -> np.ndarray:
    """Data chunks per XOR parity group: chunk ``j`` belongs to group ``j mod m``."""
    _check_code(k, m)
    groups = min(k, m)
    return np.array([len(range(i, k, m)) for i in range(groups)], dtype=int)


def xor_failure(p: float, k: int, m: int) -> float:
    """P(an XOR submessage is lost): some group (g data + 1 parity) loses two or more chunks.

    When ``m > k`` the extra parity chunks would protect nothing; only ``min(k, m)`` groups
    exist. Computed as ``1 - prod_g (1 - P(>= 2 of g+1 lost))`` without cancellation.
    """
    group_fail = stats.binom.sf(1, xor_group_sizes(k, m) + 1, p)
    return float(-np.expm1(np.sum(np.log1p(-np.minimum(group_fail, 1.0 - 1e-300)))))


def xor_success(p: float, k: int, m: int) -> float:
    """P(an XOR submessage decodes); with ``n = k/m + 1`` this is the paper's
    ``[(1-p)^n + n p (1-p)^(n-1)]^m``."""
    sizes = xor_group_sizes(k, m) + 1
    q = 1.0 - p
    return float(np.prod(q**sizes + sizes * p * q ** (sizes - 1)))


def submessage_failure(p: float, k: int, m: int, code: Code) -> float:
    """P(one submessage of ``k`` data and ``m`` parity chunks is not recoverable)."""
    if code == "mds":
        return mds_failure(p, k, m)
    if code == "xor":
        return xor_failure(p, k, m)
    raise ConfigError(f"EC code must be 'mds' or 'xor', got {code!r}")


def submessage_success(p: float, k: int, m: int, code: Code) -> float:
    """P(one submessage of ``k`` data and ``m`` parity chunks is recoverable)."""
    return 1.0 - submessage_failure(p, k, m, code)


@dataclass(frozen=True)
class ECLayout:
    """How ``num_chunks`` data chunks are cut into submessages of ``k`` data + ``m`` parity."""

    num_chunks: int
    k: int
    m: int

    def __post_init__(self) -> None:
        _check_code(self.k, self.m)
        if self.num_chunks < 1:
            raise ConfigError(f"a message has >= 1 chunk, got {self.num_chunks!r}")

    @property
    def full_submessages(self) -> int:
        """Submessages with exactly ``k`` data chunks."""
        return self.num_chunks // self.k

    @property
    def tail_data(self) -> int:
        """Data chunks of the partial last submessage (0 when ``k`` divides ``M``)."""
        return self.num_chunks % self.k

    @property
    def tail_parity(self) -> int:
        """Parity chunks of the partial last submessage, ``ceil(r*m/k)``."""
        return -(-self.tail_data * self.m // self.k)

    @property
    def submessages(self) -> int:
        """L, the number of data submessages (a partial one included)."""
        return self.full_submessages + (1 if self.tail_data else 0)

    @property
    def parity_chunks(self) -> int:
        """Total parity chunks, ``ceil(M / R)`` with ``R = k / m``."""
        return self.full_submessages * self.m + self.tail_parity

    @property
    def total_chunks(self) -> int:
        """Chunks on the wire in the first pass (data + parity)."""
        return self.num_chunks + self.parity_chunks

    def failure_probabilities(self, p: float, code: Code) -> tuple[float, float]:
        """(P(a full submessage fails), P(the partial submessage fails), 0 if none)."""
        q_full = submessage_failure(p, self.k, self.m, code)
        q_tail = 0.0
        if self.tail_data:
            q_tail = submessage_failure(p, self.tail_data, self.tail_parity, code)
        return q_full, q_tail

    def fallback_probability(self, p: float, code: Code) -> float:
        """P(at least one submessage needs the SR fallback), ``1 - P_EC^L``."""
        q_full, q_tail = self.failure_probabilities(p, code)
        log_ok = self.full_submessages * math.log1p(-min(q_full, 1.0 - 1e-300))
        log_ok += math.log1p(-min(q_tail, 1.0 - 1e-300))
        return float(-math.expm1(log_ok))

    def expected_retransmit_chunks(self, p: float, code: Code) -> float:
        """E[failed submessages] * k, with the partial submessage counted by its size (the
        paper's count, used by its formula)."""
        q_full, q_tail = self.failure_probabilities(p, code)
        return self.full_submessages * q_full * self.k + q_tail * self.tail_data

    def expected_resend_chunks(self, p: float, code: Code, fallback: Fallback) -> float:
        """E[data chunks the SR fallback resends] under the ``fallback`` model."""
        check_fallback(fallback)
        if fallback == "paper":
            return self.expected_retransmit_chunks(p, code)
        out = 0.0
        for k, m, count in self._submessage_kinds():
            f = failed_missing_distribution(p, k, m, code)
            out += count * float(np.dot(np.arange(len(f)), f))
        return out

    def _submessage_kinds(self) -> list[tuple[int, int, int]]:
        """(data chunks, parity chunks, how many such submessages)."""
        kinds = [(self.k, self.m, self.full_submessages)] if self.full_submessages else []
        if self.tail_data:
            kinds.append((self.tail_data, self.tail_parity, 1))
        return kinds


def retransmit_distribution(
    layout: ECLayout, p: float, code: Code, tail_mass: float = 1e-15
) -> tuple[np.ndarray, np.ndarray]:
    """Distribution of the number of data chunks the paper's SR fallback resends.

    Failed full submessages are Binomial(L_full, q_full), each resending ``k`` chunks; the
    partial submessage fails independently and resends ``r`` chunks. Returns
    ``(chunks, probability)`` arrays, dropping at most ``tail_mass`` of probability.
    """
    q_full, q_tail = layout.failure_probabilities(p, code)
    lf = layout.full_submessages
    if lf and q_full > 0:
        mu, sigma = lf * q_full, math.sqrt(lf * q_full * (1 - q_full))
        span = 12 * sigma + 12  # the binomial tail beyond this is far below tail_mass
        f = np.arange(max(int(mu - span), 0), min(int(mu + span) + 1, lf) + 1)
        pf = stats.binom.pmf(f, lf, q_full)
        keep = pf > tail_mass * 1e-3
        f, pf = f[keep], pf[keep]
    else:
        f, pf = np.array([0]), np.array([1.0])
    if layout.tail_data and q_tail > 0:
        chunks = np.concatenate((f * layout.k, f * layout.k + layout.tail_data))
        probs = np.concatenate((pf * (1 - q_tail), pf * q_tail))
    else:
        chunks, probs = f * layout.k, pf
    keep = probs > 0
    return chunks[keep].astype(int), probs[keep]


def failed_missing_distribution(p: float, k: int, m: int, code: Code) -> np.ndarray:
    """``f[d]`` = P(a submessage of k data + m parity chunks fails and d data chunks are
    missing), ``d = 0..k``; ``f.sum()`` is :func:`submessage_failure`.

    The protocol's fallback resends exactly those ``d`` chunks. MDS: ``d`` data and ``e``
    parity chunks lost, failure iff ``d + e > m``. XOR: a two-state pass over the groups
    (all groups so far decodable / some group not), summed without cancellation.
    """
    _check_code(k, m)
    d = np.arange(k + 1)
    if code == "mds":
        return stats.binom.pmf(d, k, p) * stats.binom.sf(m - d, m, p)
    if code != "xor":
        raise ConfigError(f"EC code must be 'mds' or 'xor', got {code!r}")
    ok, failed = np.array([1.0]), np.array([0.0])
    q = 1.0 - p
    for g in xor_group_sizes(k, m).tolist():
        total = stats.binom.pmf(np.arange(g + 1), g, p)  # data chunks of the group lost
        good = np.zeros(g + 1)
        good[0] = q**g  # parity lost or not
        good[1] = g * p * q ** (g - 1) * q  # one data chunk lost, the parity arrived
        bad = total - good  # entries 0 and 1 cancel exactly; the rest is the pmf itself
        bad[0] = 0.0
        bad[1] = g * p * q ** (g - 1) * p
        failed = np.convolve(failed, total) + np.convolve(ok, bad)
        ok = np.convolve(ok, good)
    return failed


def _trim(offset: int, probs: np.ndarray, eps: float) -> tuple[int, np.ndarray]:
    keep = np.flatnonzero(probs > eps)
    if not len(keep):
        return offset + int(np.argmax(probs)), probs[[int(np.argmax(probs))]]
    return offset + int(keep[0]), probs[keep[0] : keep[-1] + 1]


def _power(dist: np.ndarray, n: int, eps: float) -> tuple[int, np.ndarray]:
    """``dist`` convolved with itself ``n`` times (binary powers, negligible ends trimmed)."""
    out_off, out = 0, np.array([1.0])
    base_off, base = _trim(0, dist, eps)
    while n:
        if n & 1:
            out_off, out = _trim(out_off + base_off, np.convolve(out, base), eps)
        n >>= 1
        if n:
            base_off, base = _trim(2 * base_off, np.convolve(base, base), eps)
    return out_off, out


def resend_distribution(
    layout: ECLayout,
    p: float,
    code: Code,
    fallback: Fallback = "protocol",
    tail_mass: float = 1e-15,
) -> tuple[np.ndarray, np.ndarray]:
    """Distribution of the number of data chunks the SR fallback resends, ``(chunks,
    probability)``, under the ``fallback`` model (``"paper"``: :func:`retransmit_distribution`).

    ``"protocol"``: the sum over submessages of the missing data chunks of those that fail
    (:func:`failed_missing_distribution`), at most ``tail_mass`` of probability dropped.
    """
    check_fallback(fallback)
    if fallback == "paper":
        return retransmit_distribution(layout, p, code, tail_mass)
    eps = tail_mass * 1e-3
    offset, probs = 0, np.array([1.0])
    for k, m, count in layout._submessage_kinds():
        per = failed_missing_distribution(p, k, m, code)
        per[0] = 1.0 - submessage_failure(p, k, m, code)
        off, dist = _power(per, count, eps / max(count, 1))
        offset, probs = _trim(offset + off, np.convolve(probs, dist), eps)
    chunks = offset + np.arange(len(probs))
    keep = probs > 0
    return chunks[keep].astype(int), probs[keep]
