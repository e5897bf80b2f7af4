"""The discrete-event simulation's answer in the shape of the other methods (an Estimate).

``evaluate(..., method="des")`` lands here with i.i.d. chunk losses; :func:`estimate_des`
takes any loss model (bursts, traces) and the options the models cannot express
(control-path loss, reordering, a small switch buffer, encode time).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdr.simulator import analytic
from sdr.simulator.bounds import check_samples, check_write_size
from sdr.simulator.des import DesOptions, simulate_writes
from sdr.simulator.estimate import Estimate
from sdr.simulator.link import Link
from sdr.simulator.loss import Bernoulli, LossModel
from sdr.simulator.schemes import SchemeSpec
from sdr.simulator.stats import summarize

__all__ = ["estimate_des"]


def estimate_des(
    link: Link,
    size_bytes: int,
    loss: LossModel | None,
    spec: SchemeSpec,
    *,
    samples: int = 100,
    seed: int | None = 0,
    options: DesOptions | None = None,
) -> Estimate:
    """Completion-time estimate from ``samples`` simulated writes of the real protocol.

    Quantiles come with the same order-statistic confidence intervals as Monte Carlo.
    ``fallback_probability`` is the observed fraction of EC writes that needed the SR
    fallback. Where the losses are i.i.d. per chunk, ``analytic_*`` carry the model's
    values for comparison. ``extra`` holds simulation facts: simpy events, wall time,
    failed writes, the receiver's completion time, retransmissions, link counters.
    """
    size_bytes = check_write_size(size_bytes)
    samples = check_samples(samples)
    run = simulate_writes(link, size_bytes, spec, loss, samples=samples, seed=seed, options=options)
    summary = summarize(run.times_s)
    p_chunk = _chunk_drop(link, loss)
    extra: dict[str, Any] = {
        "loss_model": "none" if loss is None else type(loss).__name__,
        "failed_writes": run.failed,
        "receive_mean_s": float(run.receive_times_s.mean()),
        "retransmissions_mean": float(run.retransmissions.mean()),
        "des_events": run.events,
        "des_wall_s": run.wall_s,
        "des_events_per_s": run.events_per_s,
        "des_wall_per_write_s": run.wall_per_write_s,
        "link_a_to_b": run.link["a->b"],
        "link_b_to_a": run.link["b->a"],
    }
    if run.correct is not None:
        extra["payload_correct"] = run.correct
    if p_chunk is None:  # bursts, traces: compare with the i.i.d. link of the same mean rate
        assert loss is not None
        p = link.chunk_drop(loss.mean_rate(link.mtu), "packet")
        extra["analytic_is_iid_equivalent"] = True
    else:
        p = p_chunk
    if options is not None and options != DesOptions():
        extra["analytic_ignores_options"] = True
    analytic_mean = analytic.scheme_mean(link, size_bytes, p, spec)
    analytic_p999 = analytic.scheme_quantile(0.999, link, size_bytes, p, spec)
    bound = analytic.ec_mean_bound(link, size_bytes, p, spec) if spec.is_ec else None
    if spec.is_ec:
        extra["analytic_fallback_probability"] = analytic.ec_fallback_probability(
            link, size_bytes, p, spec
        )
    fallback = float(np.mean(run.fell_back)) if run.fell_back is not None else None
    return Estimate(
        scheme=spec.name,
        params=spec.params(link),
        method="des",
        size_bytes=int(size_bytes),
        chunk_drop_probability=p,
        ideal_s=link.ideal_time_s(size_bytes),
        fallback_probability=fallback,
        quantile_method="des",
        samples=samples,
        seed=seed,
        **summary.estimate_fields(),
        analytic_mean_s=analytic_mean,
        analytic_p999_s=analytic_p999,
        mean_bound_s=bound,
        extra=extra,
    )


def _chunk_drop(link: Link, loss: LossModel | None) -> float | None:
    """Per-chunk loss probability when losses are i.i.d. (None for bursts, traces)."""
    if loss is None:
        return 0.0
    if isinstance(loss, Bernoulli) and loss.unit == "chunk":
        return loss.p
    return loss.chunk_drop_probability(link.packets_per_chunk, link.mtu)
