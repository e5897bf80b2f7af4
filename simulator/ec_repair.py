"""The protocol's EC repair: how many data chunks it resends and how many rounds it waits.

When a submessage cannot be decoded, the SDK's receiver NACKs its *missing* data chunks
(``sdr.reliability.erasure_coding``), the sender resends them with Selective Repeat, and
the receiver decodes the submessage as soon as it is recoverable again: an MDS submessage
that lost ``d`` data and ``e`` parity chunks (``d + e > m``) needs ``d + e - m`` of the ``d``
resent chunks, an XOR group that lost ``x`` data chunks needs ``x - 1`` of them if its
parity arrived, all ``x`` if not. A resent chunk lost again costs an RTO (``O``), but only if
its submessage still needs it.

The model (``fallback="protocol"``): with ``n`` resent chunks in all and ``R_s`` the rounds
of retransmission failed submessage ``s`` waits for (0: its first resends suffice),

    T_repair = n * T_INJ + O * max_s R_s

(the NACK's arrival to the last needed chunk's injection). It places every submessage's
last needed chunk at the end of the resends, so it is high by at most ``n * T_INJ`` on
writes where some submessage waits a round (see docs/simulator.md for the size).

Per submessage, ``levels[j, d]`` = P(it fails, ``d`` data chunks are missing, and it is
recoverable after at most ``j`` rounds); the message's joint law of ``(n, max R)`` is the
``L``-fold convolution of the per-submessage rows, one per ``j``.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from sdr.simulator.ec_model import (
    Code,
    ECLayout,
    _power,
    _trim,
    failed_missing_distribution,
    submessage_failure,
    xor_group_sizes,
)
from sdr.simulator.sr_model import retry_levels

__all__ = ["repair_levels", "message_repair", "repair_mean", "repair_cdf", "sample_repair"]

#: resend rounds the repair model evaluates at most (its time is linear in them; a chunk
#: that needs more is lost nearly every time it is sent)
MAX_REPAIR_ROUNDS = 256


def _rounds(p: float, chunks: int) -> int:
    """Resend rounds J after which ``chunks * p^(J+1)`` (any resend still lost) is negligible."""
    return retry_levels(chunks, p, MAX_REPAIR_ROUNDS, "the EC repair model")


def repair_levels(p: float, k: int, m: int, code: Code, rounds: int) -> np.ndarray:
    """``out[j, d]`` for ``j = 0..rounds``: P(a submessage fails, ``d`` of its data chunks
    are missing, and it is recoverable once its resends have had ``j`` retries)."""
    out = np.zeros((rounds + 1, k + 1))
    d = np.arange(k + 1)
    arrived = 1.0 - p ** (np.arange(rounds + 1) + 1.0)  # a resent chunk arrived within j retries
    if code == "mds":  # every round at once
        pd = stats.binom.pmf(d, k, p)
        for e in range(m + 1):
            need = d + e - m
            fails = need > 0
            sat = stats.binom.sf(need - 1, d, arrived[:, None])  # P(at least `need` of d arrived)
            out += np.where(fails, pd * stats.binom.pmf(e, m, p) * sat, 0.0)
        return out
    for j, a in enumerate(arrived):
        out[j] = _xor_level(p, k, m, float(a))
    return out


def _xor_level(p: float, k: int, m: int, a: float) -> np.ndarray:
    q = 1.0 - p
    ok, sat = np.array([1.0]), np.array([0.0])
    for g in xor_group_sizes(k, m).tolist():
        x = np.arange(g + 1)
        lost = stats.binom.pmf(x, g, p)
        good = np.zeros(g + 1)
        good[0] = q**g
        good[1] = g * p * q ** (g - 1) * q
        # parity arrived, x >= 2 lost: x - 1 of them needed; parity lost, x >= 1: all x
        with_parity = np.where(x >= 2, lost * q * stats.binom.sf(x - 2, x, a), 0.0)
        without = np.where(x >= 1, lost * p * a**x, 0.0)
        bad = with_parity + without
        sat = np.convolve(sat, good + bad) + np.convolve(ok, bad)
        ok = np.convolve(ok, good)
    return sat


def message_repair(
    layout: ECLayout, p: float, code: Code, tail_mass: float = 1e-15
) -> tuple[np.ndarray, np.ndarray]:
    """``(n, P)``: ``P[j, i]`` = P(``n[i]`` chunks are resent and no failed submessage waits
    more than ``j`` rounds); the last row is P(``n[i]`` chunks are resent)."""
    kinds = [(layout.k, layout.m, layout.full_submessages)] if layout.full_submessages else []
    if layout.tail_data:
        kinds.append((layout.tail_data, layout.tail_parity, 1))
    rounds = _rounds(p, layout.num_chunks)
    eps = tail_mass * 1e-3
    per_kind = [
        np.vstack(
            [repair_levels(p, k, m, code, rounds), failed_missing_distribution(p, k, m, code)]
        )
        for k, m, _ in kinds
    ]  # the last row: no limit on the rounds
    rows: list[tuple[int, np.ndarray]] = []
    for j in range(rounds + 2):
        offset, probs = 0, np.array([1.0])
        for (k, m, count), levels in zip(kinds, per_kind, strict=True):
            per = levels[j].copy()
            per[0] = 1.0 - submessage_failure(p, k, m, code)
            off, dist = _power(per, count, eps / max(count, 1))
            offset, probs = _trim(offset + off, np.convolve(probs, dist), eps)
        rows.append((offset, probs))
    lo = min(o for o, _ in rows)
    hi = max(o + len(pr) for o, pr in rows)
    table = np.zeros((len(rows), hi - lo))
    for r, (o, pr) in enumerate(rows):
        table[r, o - lo : o - lo + len(pr)] = pr
    table = np.minimum.accumulate(table[::-1], axis=0)[::-1]  # monotone in j (rounding)
    return np.arange(lo, hi), table


def repair_mean(n: np.ndarray, table: np.ndarray, t: float, o: float, extra: float) -> float:
    """E[fallback cost]: ``sum_n P(n) (extra + n*T)`` plus ``O * E[max R]``."""
    full = table[-1]
    resend = n > 0
    cost = float(np.dot(full[resend], extra + n[resend] * t))
    rounds = float(np.sum(full[resend][None, :] - table[:-1, resend]))
    return cost + o * rounds


def repair_cdf(
    s: np.ndarray, n: np.ndarray, table: np.ndarray, t: float, o: float, extra: float
) -> np.ndarray:
    """P(fallback happened and its cost <= s) for each ``s`` (cost after the lossless time)."""
    resend = n > 0
    nn, tab = n[resend], table[:, resend]
    levels = tab.shape[0] - 1
    j = np.floor((s[:, None] - extra - nn[None, :] * t) / o + 1e-9)
    ok = j >= 0
    row = np.clip(j, 0, levels).astype(int)
    row = np.where(j >= levels, levels, row)
    vals = tab[row, np.arange(len(nn))[None, :]]
    return np.where(ok, vals, 0.0).sum(axis=1)


def sample_repair(
    rng: np.random.Generator, layout: ECLayout, p: float, code: Code, samples: int
) -> tuple[np.ndarray, np.ndarray]:
    """Samples of (resent chunks, max rounds over failed submessages) under the protocol."""
    q_full, q_tail = layout.failure_probabilities(p, code)
    full = rng.binomial(layout.full_submessages, q_full, size=samples)
    tail = (rng.random(samples) < q_tail) & bool(layout.tail_data)
    n = np.zeros(samples, dtype=np.int64)
    rounds = np.zeros(samples, dtype=np.int64)
    for k, m, count in ((layout.k, layout.m, full), (layout.tail_data, layout.tail_parity, tail)):
        count = np.asarray(count, dtype=np.int64)
        total = int(count.sum())
        if total == 0:
            continue
        levels = repair_levels(p, k, m, code, _rounds(p, layout.num_chunks))
        joint = np.diff(levels, axis=0, prepend=0.0)  # P(fail, d, exactly j rounds)
        joint[-1] += failed_missing_distribution(p, k, m, code) - levels[-1]  # the rest
        cdf = np.cumsum(np.clip(joint, 0.0, None).ravel())
        pick = np.searchsorted(cdf / cdf[-1], rng.random(total), side="right")
        pick = np.minimum(pick, cdf.size - 1)
        j, d = np.divmod(pick, k + 1)
        owner = np.repeat(np.arange(samples), count)
        np.add.at(n, owner, d)
        np.maximum.at(rounds, owner, j)
    return n, rounds
