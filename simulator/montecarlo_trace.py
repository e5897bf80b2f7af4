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
* EC's fallback resends the failed submessages' data chunks with SR, as in the analytic
  model.
"""

from __future__ import annotations

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
    return packets.reshape(streams, chunks, ppc).any(axis=2)


def _max_delay_trace(
    rng: np.random.Generator, model: LossModel, link: Link, o: float, n: np.ndarray
) -> np.ndarray:
    """``max_{i <= n_s} (i*T + O*Z_i)`` per row, retransmitting until every chunk arrived."""
    streams, width = n.size, int(n.max(initial=0))
    if width == 0:
        return np.zeros(streams)
    index = np.arange(1, width + 1)
    wanted = index[None, :] <= n[:, None]
    lost = chunk_losses(rng, model, streams, width, link) & wanted
    retries = np.zeros((streams, width))
    for _ in range(_MAX_ROUNDS):
        if not lost.any():
            break
        retries += lost
        lost &= chunk_losses(rng, model, streams, width, link)
    else:  # pragma: no cover - a loss rate of ~1
        raise ConfigError("the loss model drops (almost) every chunk; SR never completes")
    delay = np.where(wanted, index[None, :] * link.t_inj_s + o * retries, 0.0)
    return delay.max(axis=1)


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
    return np.concatenate(out) + link.rtt_s


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
        if code == "mds":
            failed = data.sum(axis=1) + parity.sum(axis=1) > m
        elif code == "xor":
            groups = len(xor_group_sizes(k, m))
            per_group = np.zeros((streams, groups), dtype=int)
            for j in range(k):
                per_group[:, j % m] += data[:, j]
            per_group += parity[:, :groups]
            failed = (per_group >= 2).any(axis=1)
        else:
            raise ConfigError(f"EC code must be 'mds' or 'xor', got {code!r}")
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
        resend = ec_failures_trace(rng, layout, spec.code, model, link, b, spec.fallback)
        retry = _max_delay_trace(rng, model, link, o, resend)
        times.append(lossless + np.where(resend > 0, extra + retry, 0.0))
        fell.append(resend > 0)
    return np.concatenate(times), np.concatenate(fell)
