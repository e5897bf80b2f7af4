"""The selector an adaptive policy runs online: the analytic models on the live estimate.

The SDK's core cannot import the simulator, so the layer that builds reliable QPs makes
the selector here and hands it to :class:`sdr.adaptive.AdaptivePolicy`::

    selector = analytic_selector(link_rate="1Gbit/s", rtt="25ms", mtu=8192, chunk_size=65536)
    rqp = ReliableQP(qp, config, adaptive=AdaptivePolicy(selector))

Each evaluation scores every candidate with the exact analytic mean (the paper's models,
:mod:`sdr.simulator.analytic`) on a :class:`~sdr.simulator.link.Link` built from the estimate:
its RTT (else the configured one), its delivery rate capped by the configured rate (a
paced sender never delivers faster than its pacing), and the per-packet drop rate implied
by the per-chunk estimate. The models assume independent losses; with bursty losses
(mean run > ``burst_threshold`` chunks) a burst of ``b`` chunks hurts an EC submessage
like ``b`` independent losses and SR like one, so the EC candidates are scored with the
chunk drop rate while SR candidates see the rate of loss *events* (drop / burst).
An evaluation costs a few milliseconds per candidate (one analytic mean each), run in the
sender's progress loop; so inputs are quantized (drop rate to 1/16 decade, RTT to 0.1 ms,
delivery rate to 1/32 decade) and scores cached: a steady link costs a dictionary lookup.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

from sdr.adaptive import Candidate, LinkEstimate, Selector
from sdr.simulator import analytic
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec
from sdr.units import parse_rate, parse_size, parse_time

__all__ = ["analytic_selector"]


def analytic_selector(
    *,
    link_rate: float | str,
    rtt: float | str,
    mtu: int | str,
    chunk_size: int | str,
    alpha: float = 2.0,
    burst_threshold: float = 1.5,
) -> Selector:
    """A selector scoring candidates by analytic mean completion time (seconds)."""
    rate, base_rtt = parse_rate(link_rate), parse_time(rtt)
    mtu_b, chunk = parse_size(mtu), parse_size(chunk_size)

    def select(
        est: LinkEstimate, size: int, candidates: Sequence[Candidate]
    ) -> Mapping[Candidate, float]:
        delivered = min(rate, est.bandwidth) if est.bandwidth else rate
        p_chunk = min(est.chunk_drop or 0.0, 0.999)
        burst = est.burst or 1.0
        events = p_chunk / burst if burst > burst_threshold else p_chunk
        return dict(
            scores(
                _q(delivered, 32), round(est.rtt or base_rtt, 4), _q(p_chunk, 16), _q(events, 16),
                size, tuple(candidates),
            )
        )  # fmt: skip

    @functools.lru_cache(maxsize=4096)
    def scores(
        rate: float, rtt: float, p_chunk: float, events: float, size: int,
        candidates: tuple[Candidate, ...],
    ) -> tuple[tuple[Candidate, float], ...]:  # fmt: skip
        link = Link(rate=rate, rtt=rtt, mtu=mtu_b, chunk_size=chunk, alpha=alpha)
        out: dict[Candidate, float] = {}
        for cand in candidates:
            if cand.is_ec:
                spec = SchemeSpec(cand.scheme, k=cand.k, m=cand.m, rto_rtts=1.0 + alpha)
                out[cand] = analytic.scheme_mean(link, size, p_chunk, spec)
            else:
                rto = 1.0 + alpha if cand.scheme == "sr-rto" else None
                out[cand] = analytic.scheme_mean(link, size, events, SchemeSpec(cand.scheme, rto))
        return tuple(out.items())

    return select


def _q(value: float, per_decade: int) -> float:
    """``value`` rounded to ``1/per_decade`` of a decade (0 stays 0)."""
    if value <= 0:
        return 0.0
    return 10 ** (round(math.log10(value) * per_decade) / per_decade)
