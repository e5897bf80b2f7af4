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
    "ECLayout",
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


def _check_code(k: int, m: int) -> None:
    if k < 1 or m < 1:
        raise ConfigError(f"EC needs k >= 1 data and m >= 1 parity chunks, got k={k}, m={m}")


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
        """E[failed submessages] * k, with the partial submessage counted by its size."""
        q_full, q_tail = self.failure_probabilities(p, code)
        return self.full_submessages * q_full * self.k + q_tail * self.tail_data


def retransmit_distribution(
    layout: ECLayout, p: float, code: Code, tail_mass: float = 1e-15
) -> tuple[np.ndarray, np.ndarray]:
    """Distribution of the number of data chunks the SR fallback must resend.

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
