"""The completion-time model evaluated on the losses one simulated write actually saw.

Sampling noise swamps small timing differences: an SR write's time jumps by a whole RTO
with each retransmission round, so comparing a few hundred simulated means with the
model's mean says little below ~5%. Given the lost transmissions of every chunk of a
simulated write (:class:`sdr.simulator.des_losslog.LossLog`), the model's time of *that*
write is a number, and ``simulated - model`` has almost no variance. Its mean is the
protocol's timing difference from the model; adding it to the exact or Monte Carlo mean
is a control-variate estimate of the simulated mean.

``protocol=False`` is the paper's model (:mod:`sdr.simulator.analytic`) itself;
``protocol=True`` adds what the real protocol does differently (see docs/simulator.md):

* a chunk is complete once every packet arrived, over any number of transmissions (the
  receiver keeps a packet bitmap); this is in the loss counts, not in the formula: the
  simulation records them that way, :func:`expected_protocol_difference` samples both;

* ``sr-nack``: a lost last chunk has no later chunk to reveal the hole, so it waits for
  the backstop RTO (``1 + alpha`` RTTs), not one RTT;
* EC: the receiver decodes (and acknowledges) as soon as every submessage has ``k`` of its
  chunks, and parity is sent after all data, so a write whose data all arrived ends at
  ``M*T_INJ + RTT``, not ``(M + P)*T_INJ + RTT``; a partial last submessage carries ``m``
  parity chunks, not ``ceil(r*m/k)``;
* EC fallback: the fallback timer runs from the first chunk that arrived, and each
  resent chunk has its own place in the resend queue (the model puts every failed
  submessage's last needed chunk at the end of the resends).

Fallback writes are paired too: the model's default fallback (``"protocol"``,
:mod:`sdr.simulator.ec_repair`) resends the missing data chunks of the failed submessages,
whose retransmission losses the counts hold.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec

__all__ = ["expected_protocol_difference", "paired_model_time"]


def paired_model_time(
    link: Link,
    size_bytes: int,
    spec: SchemeSpec,
    data_losses: np.ndarray,
    parity_losses: np.ndarray | None = None,
    *,
    protocol: bool = False,
) -> float:
    """The model's completion time of one write with these lost transmissions per chunk.

    EC writes that needed the SR fallback: the protocol's repair (the missing data chunks
    of the failed submessages are resent, a submessage is done once recoverable; the model
    is :mod:`sdr.simulator.ec_repair`); NaN for the paper's fallback (``spec.fallback ==
    "paper"``, ``protocol=False``), which resends chunks whose retransmission losses the
    counts do not hold. MDS and XOR recovery rules are those of :mod:`sdr.simulator.ec_model`.
    """
    z = np.asarray(data_losses, dtype=np.int64)
    n = link.num_chunks(size_bytes)
    if len(z) != n:
        raise ConfigError(f"expected {n} data chunk loss counts, got {len(z)}")
    t, rtt = link.t_inj_s, link.rtt
    if not spec.is_ec:
        over = np.full(n, spec.retry_rtts(link) * rtt + t)
        if protocol and spec.name == "sr-nack":  # no later chunk shows the last one's hole
            over[-1] = spec.resolved_rto_rtts(link) * rtt + t
        return float(np.max(np.arange(1, n + 1) * t + over * z) + rtt)
    if parity_losses is None:
        raise ConfigError("EC needs the parity chunks' loss counts too")
    zp = np.asarray(parity_losses, dtype=np.int64)
    k, m = spec.k, spec.m
    subs = -(-n // k)
    ready: list[float] = []
    needs: list[tuple[np.ndarray, int]] = []
    parity_total = 0
    for s in range(subs):
        data = np.arange(s * k, min(s * k + k, n))
        # the model gives a partial submessage ceil(r*m/k) parity chunks; the SDK sends m
        n_par = m if protocol or len(data) == k else -(-len(data) * m // k)
        parity_total += n_par
        par = np.arange(s * m, s * m + n_par)
        data_ok, par_ok = z[data] == 0, zp[par] == 0
        when = _recovered_at(spec, data_ok, par_ok, (data + 1) * t, (n + par + 1) * t)
        if when is None:
            needs.extend((data[members], need) for members, need in _needs(spec, data_ok, par_ok))
        else:
            ready.append(when)
    if needs:
        if not protocol and spec.fallback == "paper":
            return float("nan")  # resends of chunks that arrived: their losses are unknown
        return _fallback_time(link, spec, z, zp, parity_total, needs, protocol)
    if protocol:
        return float(max(ready) + rtt)
    return float((n + parity_total) * t + rtt)


def _needs(
    spec: SchemeSpec, data_ok: np.ndarray, par_ok: np.ndarray
) -> list[tuple[np.ndarray, int]]:
    """What a failed submessage needs from its resent (missing) data chunks: pairs of
    (those chunks, how many of them must arrive), all of which must hold."""
    lost = np.flatnonzero(~data_ok)
    if spec.code == "mds":
        return [(lost, int(len(lost) + (~par_ok).sum() - len(par_ok)))]
    out = []
    groups = min(len(data_ok), len(par_ok))
    for g in range(groups):
        members = np.arange(g, len(data_ok), len(par_ok))
        missing = members[~data_ok[members]]
        if len(missing) + int(not par_ok[g]) >= 2:
            out.append((missing, len(missing) - 1 if par_ok[g] else len(missing)))
    return out


def _fallback_time(
    link: Link,
    spec: SchemeSpec,
    z: np.ndarray,
    zp: np.ndarray,
    parity_total: int,
    needs: list[tuple[np.ndarray, int]],
    protocol: bool,
) -> float:
    """Completion of a write that fell back, from the losses of its resent chunks.

    Resent: the missing data chunks of the failed submessages, in index order, each lost
    ``z - 1`` more times; a submessage is done once enough of them arrived. The model
    (:mod:`sdr.simulator.ec_repair`): ``(M + P)*T + (2 + beta)*RTT + n*T + O * max rounds``.
    The protocol: the fallback timer runs from the first chunk that arrived (and not
    before ``beta*RTT`` after the last), and every resend has its own place in the queue.
    """
    t, rtt, n = link.t_inj_s, link.rtt, len(z)
    o = spec.retry_rtts(link) * rtt + t
    # every missing data chunk of a failed submessage is resent (those of submessages that
    # decode are not NACKed)
    resent = _failed_missing(z, spec.k, np.concatenate([c for c, _ in needs]))
    position = np.zeros(n, dtype=np.int64)
    position[resent] = np.arange(1, len(resent) + 1)
    retries = z - 1
    if not protocol:
        rounds = max(_nth(retries[c], need) for c, need in needs)
        fire = (n + parity_total) * t + link.beta * rtt
        return float(fire + 2 * rtt + len(resent) * t + o * rounds)
    done = np.concatenate([np.arange(1, n + 1) * t, (n + np.arange(len(zp)) + 1) * t])
    arrived = done[np.concatenate([z == 0, zp == 0])]
    subs = -(-n // spec.k)
    first, last = (arrived.min(), arrived.max()) if len(arrived) else (0.0, 0.0)
    fire = max(first + (n + subs * spec.m) * t, last) + link.beta * rtt
    nack = fire + rtt
    at = nack + position * t + o * retries
    return float(max(_nth(at[c], need) for c, need in needs) + rtt)


def _failed_missing(z: np.ndarray, k: int, chunks: np.ndarray) -> np.ndarray:
    """Every missing data chunk of the submessages that ``chunks`` belong to."""
    subs = np.unique(chunks // k)
    members = np.concatenate([np.arange(s * k, min(s * k + k, len(z))) for s in subs])
    return members[z[members] > 0]


def _nth(values: np.ndarray, need: int) -> float:
    """The ``need``-th smallest value (0 when nothing is needed)."""
    if need <= 0:
        return 0.0
    return float(np.sort(values)[need - 1])


def _recovered_at(
    spec: SchemeSpec,
    data_ok: np.ndarray,
    par_ok: np.ndarray,
    data_done: np.ndarray,
    par_done: np.ndarray,
) -> float | None:
    """When a submessage becomes decodable (None if it never does without repair)."""
    if spec.code == "mds":
        have = np.sort(np.concatenate([data_done[data_ok], par_done[par_ok]]))
        need = len(data_ok)
        return float(have[need - 1]) if len(have) >= need else None
    # XOR: group g = data chunks j with j % m == g plus parity g; at most one loss each
    times = []
    for g in range(len(par_ok)):
        members = np.arange(g, len(data_ok), len(par_ok))
        lost = int((~data_ok[members]).sum()) + int(not par_ok[g])
        if lost > 1:
            return None
        if lost == 0 or par_ok[g]:
            arrived = data_done[members][data_ok[members]]
            extra = [par_done[g]] if (par_ok[g] and lost == 1) else []
            times.append(float(max([*arrived.tolist(), *extra], default=0.0)))
        else:  # the parity is the lost one: all data arrived
            times.append(float(data_done[members].max()))
    return max(times, default=0.0)


def expected_protocol_difference(
    link: Link, size_bytes: int, spec: SchemeSpec, p: float, *, samples: int = 2000, seed: int = 0
) -> float:
    """E[protocol - model] under i.i.d. chunk losses of probability ``p`` (seconds).

    The documented differences of the real protocol from the model (module docstring),
    averaged over sampled losses (EC writes that fall back included, except under
    ``fallback="paper"``, whose resends the counts cannot price). Losses are drawn
    per packet (``1 - (1 - p)^(1/N)`` each), so that the model sees a chunk lost by every
    transmission that lost any packet and the protocol only until every packet of the
    chunk has arrived once. Adding the result to the model's mean predicts the simulated
    mean.
    """
    rng = np.random.default_rng(seed)
    n = link.num_chunks(size_bytes)
    n_parity = -(-n // spec.k) * spec.m if spec.is_ec else 0
    z_model, z_proto = _chunk_losses(rng, link, p, samples, n + n_parity)
    diffs = []
    for i in range(samples):
        zp_m = z_model[i, n:] if spec.is_ec else None
        zp_p = z_proto[i, n:] if spec.is_ec else None
        a = paired_model_time(link, size_bytes, spec, z_proto[i, :n], zp_p, protocol=True)
        b = paired_model_time(link, size_bytes, spec, z_model[i, :n], zp_m, protocol=False)
        if a == a and b == b:
            diffs.append(a - b)
    return float(np.mean(diffs)) if diffs else 0.0


def _chunk_losses(
    rng: np.random.Generator, link: Link, p: float, samples: int, chunks: int, rounds: int = 6
) -> tuple[np.ndarray, np.ndarray]:
    """Lost transmissions per chunk as the model counts them and as the protocol does.

    From the same per-packet losses of ``rounds`` transmissions: the model's count is the
    transmissions before the first that lost no packet; the protocol's, the transmissions
    before every packet has arrived at least once.
    """
    per_packet = float(-np.expm1(np.log1p(-p) / link.packets_per_chunk))
    lost = rng.random((samples, chunks, rounds, link.packets_per_chunk)) < per_packet
    # reductions over one axis of a 4-D array are arrays (numpy's stubs allow a scalar)
    clean = ~cast(np.ndarray, lost.any(axis=3))
    complete = cast(np.ndarray, np.logical_or.accumulate(~lost, axis=2).all(axis=3))
    clean[:, :, -1] = complete[:, :, -1] = True  # beyond ``rounds``: negligible
    return np.argmax(clean, axis=2), np.argmax(complete, axis=2)
