"""Monte Carlo with any loss model (bursts, size-dependent loss, traces), packet by packet.

Slower than :mod:`sdr.simulator.montecarlo` (it draws every packet), but it needs nothing from
the loss model beyond its vectorized ``sample``, so it covers correlated losses that the
i.i.d. analytic models cannot.

Simplifications, stated so results are read correctly:

* a chunk is lost when any of its packets is lost;
* the first pass sends the chunks (EC: data then parity of each submessage in turn) as one
  packet stream; each retransmission round is a fresh stream from the model's stationary
  state, aligned with the first pass (a retransmission is O = RTO + T_INJ later, long
  after most bursts have ended);
* EC's fallback, as in the analytic model: ``fallback="protocol"`` resends the missing
  data chunks of the failed submessages and a submessage is done once it is recoverable
  again (``n*T_INJ + O * max rounds``, :mod:`sdr.simulator.ec_repair`); ``"paper"``
  resends all their data chunks and waits for every one.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator.analytic import ec_parts, retry_cost_s
from sdr.simulator.ec_model import ECLayout, check_fallback, xor_group_sizes
from sdr.simulator.link import Link
from sdr.simulator.loss import LossModel
from sdr.simulator.schemes import SchemeSpec

__all__ = ["chunk_losses", "sample_sr_trace", "sample_ec_trace", "ec_failures_trace"]

_MAX_ROUNDS = 10_000
_BATCH_PACKETS = 4_000_000


def chunk_losses(
    rng: np.random.Generator, model: LossModel, streams: int, chunks: int, link: Link
) -> np.ndarray:
    """Chunk-loss indicators ``(streams, chunks)``: a chunk is lost if any packet is."""
    ppc = link.packets_per_chunk
    packets = model.sample(rng, streams, chunks * ppc, link.mtu)
    # a reduction over one axis of a 3-D array is an array (numpy's stubs allow a scalar)
    return cast(np.ndarray, packets.reshape(streams, chunks, ppc).any(axis=2))


def _retry_rounds(
    rng: np.random.Generator, model: LossModel, link: Link, n: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(retries, wanted)``, ``(streams, max n)``: how often resend ``i`` of each row was
    lost, retransmitting until every one of its ``n_s`` chunks arrived."""
    streams, width = n.size, int(n.max(initial=0))
    index = np.arange(1, width + 1)
    wanted = index[None, :] <= n[:, None]
    retries = np.zeros((streams, width))
    if width == 0:
        return retries, wanted
    lost = chunk_losses(rng, model, streams, width, link) & wanted
    for _ in range(_MAX_ROUNDS):
        if not lost.any():
            break
        retries += lost
        lost &= chunk_losses(rng, model, streams, width, link)
    else:  # pragma: no cover - a loss rate of ~1
        raise ConfigError("the loss model drops (almost) every chunk; SR never completes")
    return retries, wanted


def _max_delay_trace(
    rng: np.random.Generator, model: LossModel, link: Link, o: float, n: np.ndarray
) -> np.ndarray:
    """``max_{i <= n_s} (i*T + O*Z_i)`` per row, retransmitting until every chunk arrived."""
    if int(n.max(initial=0)) == 0:
        return np.zeros(n.size)
    retries, wanted = _retry_rounds(rng, model, link, n)
    index = np.arange(1, retries.shape[1] + 1)
    delay = np.where(wanted, index[None, :] * link.t_inj_s + o * retries, 0.0)
    return delay.max(axis=1)


def _protocol_repair(
    rng: np.random.Generator,
    layout: ECLayout,
    code: str,
    model: LossModel,
    link: Link,
    streams: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per stream: (resent data chunks, rounds the slowest failed submessage waits)."""
    lost = chunk_losses(rng, model, streams, layout.total_chunks, link)
    subs = [(layout.k, layout.m)] * layout.full_submessages
    if layout.tail_data:
        subs.append((layout.tail_data, layout.tail_parity))
    pos, resent = 0, []
    for k, m in subs:
        data, parity = lost[:, pos : pos + k], lost[:, pos + k : pos + k + m]
        pos += k + m
        resent.append(data & _failed(data, parity, k, m, code)[:, None])
    resend = np.concatenate(resent, axis=1)  # (streams, M): resent data chunks
    n = resend.sum(axis=1)
    retries, _ = _retry_rounds(rng, model, link, n)
    rounds_of = np.zeros(resend.shape)
    rounds_of[resend] = retries[np.arange(retries.shape[1])[None, :] < n[:, None]]
    pos, first, worst = 0, 0, np.zeros(streams)
    for k, m in subs:
        data, parity = lost[:, pos : pos + k], lost[:, pos + k : pos + k + m]
        pos += k + m
        mine, r = resend[:, first : first + k], rounds_of[:, first : first + k]
        first += k
        if code == "mds":
            need = data.sum(axis=1) + parity.sum(axis=1) - m
            worst = np.maximum(worst, _nth_smallest(np.where(mine, r, np.inf), need))
            continue
        for g in range(len(xor_group_sizes(k, m))):
            cols = np.arange(g, k, m)
            missing = mine[:, cols].sum(axis=1)
            need = np.where(parity[:, g], missing, missing - 1)
            need = np.where(missing + parity[:, g] >= 2, need, 0)
            worst = np.maximum(
                worst, _nth_smallest(np.where(mine[:, cols], r[:, cols], np.inf), need)
            )
    return n, worst


def _failed(data: np.ndarray, parity: np.ndarray, k: int, m: int, code: str) -> np.ndarray:
    """Which rows' submessage cannot be decoded."""
    if code == "mds":
        return data.sum(axis=1) + parity.sum(axis=1) > m
    if code != "xor":
        raise ConfigError(f"EC code must be 'mds' or 'xor', got {code!r}")
    groups = len(xor_group_sizes(k, m))
    per_group = np.zeros((data.shape[0], groups), dtype=int)
    for j in range(k):
        per_group[:, j % m] += data[:, j]
    per_group += parity[:, :groups]
    # a reduction over one axis of a 2-D array is an array (numpy's stubs allow a scalar)
    return cast(np.ndarray, (per_group >= 2).any(axis=1))


def _nth_smallest(values: np.ndarray, need: np.ndarray) -> np.ndarray:
    """Per row, the ``need``-th smallest value (0 where ``need <= 0``)."""
    ordered = np.sort(values, axis=1)
    pick = np.clip(need - 1, 0, values.shape[1] - 1)[:, None]
    return np.where(need > 0, np.take_along_axis(ordered, pick, axis=1)[:, 0], 0.0)


def _batched(samples: int, packets_per_sample: int) -> list[int]:
    per = max(1, _BATCH_PACKETS // max(packets_per_sample, 1))
    return [min(per, samples - s) for s in range(0, samples, per)]


def sample_sr_trace(
    rng: np.random.Generator,
    link: Link,
    size: int,
    model: LossModel,
    spec: SchemeSpec,
    samples: int,
) -> np.ndarray:
    """Samples of T_SR in seconds under ``model`` (drawn packet by packet)."""
    n = link.num_chunks(size)
    o = retry_cost_s(link, spec)
    out = [
        _max_delay_trace(rng, model, link, o, np.full(b, n))
        for b in _batched(samples, n * link.packets_per_chunk)
    ]
    return np.concatenate(out) + link.rtt


def ec_failures_trace(
    rng: np.random.Generator,
    layout: ECLayout,
    code: str,
    model: LossModel,
    link: Link,
    streams: int,
    fallback: str = "protocol",
) -> np.ndarray:
    """Data chunks to resend per stream, decoding each submessage from sampled losses.

    ``fallback="protocol"``: a failed submessage resends its missing data chunks (the SDK);
    ``"paper"``: all of its data chunks.
    """
    check_fallback(fallback)
    lost = chunk_losses(rng, model, streams, layout.total_chunks, link)
    resend = np.zeros(streams, dtype=int)
    pos = 0
    subs = [(layout.k, layout.m)] * layout.full_submessages
    if layout.tail_data:
        subs.append((layout.tail_data, layout.tail_parity))
    for k, m in subs:
        data, parity = lost[:, pos : pos + k], lost[:, pos + k : pos + k + m]
        pos += k + m
        failed = _failed(data, parity, k, m, code)
        resend += failed * (k if fallback == "paper" else data.sum(axis=1))
    return resend


def sample_ec_trace(
    rng: np.random.Generator,
    link: Link,
    size: int,
    model: LossModel,
    spec: SchemeSpec,
    samples: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Samples of T_EC in seconds under ``model``, and the fallback indicator."""
    lossless, extra, layout = ec_parts(link, size, spec)
    o = retry_cost_s(link, spec)
    times, fell = [], []
    for b in _batched(samples, layout.total_chunks * link.packets_per_chunk):
        if spec.fallback == "protocol":
            resend, rounds = _protocol_repair(rng, layout, spec.code, model, link, b)
            retry = resend * link.t_inj_s + o * rounds
        else:
            resend = ec_failures_trace(rng, layout, spec.code, model, link, b, spec.fallback)
            retry = _max_delay_trace(rng, model, link, o, resend)
        times.append(lossless + np.where(resend > 0, extra + retry, 0.0))
        fell.append(resend > 0)
    return np.concatenate(times), np.concatenate(fell)
