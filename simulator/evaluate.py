"""One entry point that predicts a scheme's completion time on a link, by any method.

``analytic`` gives the exact mean and quantiles under the i.i.d. chunk-loss model (the
product CDF); ``montecarlo`` samples it and adds 95% confidence intervals to every
quantile (and still reports the exact p99.9 beside the sampled one); ``des`` runs the
real protocol code in a discrete-event simulation (:mod:`sdr.simulator.des`).
:func:`evaluate_loss_model` samples packet by packet under any loss model (bursts, traces).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator import analytic
from sdr.simulator.bounds import check_samples, check_write_size
from sdr.simulator.estimate import Estimate
from sdr.simulator.link import DropUnit, Link
from sdr.simulator.loss import LossModel
from sdr.simulator.montecarlo import sample_scheme
from sdr.simulator.montecarlo_trace import sample_ec_trace, sample_sr_trace
from sdr.simulator.schemes import SchemeSpec
from sdr.simulator.stats import QUANTILES, summarize

__all__ = ["Method", "Estimate", "evaluate", "evaluate_loss_model"]

log = logging.getLogger(__name__)

Method = Literal["analytic", "montecarlo", "des"]


def evaluate(
    link: Link,
    size_bytes: int,
    drop: float,
    spec: SchemeSpec,
    *,
    drop_unit: DropUnit = "chunk",
    method: Method = "analytic",
    samples: int = 10_000,
    seed: int | None = 0,
) -> Estimate:
    """Predict the completion time of a ``size_bytes`` write with ``spec`` on ``link``.

    Args:
        drop: loss probability per ``drop_unit`` (``"chunk"``, the paper's model, or
            ``"packet"``, converted with ``1 - (1 - p)^N``).
        method: ``"analytic"``, ``"montecarlo"`` or ``"des"`` (simulated writes of the
            real protocol, :func:`sdr.simulator.des_estimate.estimate_des`; ~0.1 s per 64
            chunks written, so use hundreds of samples, not the Monte Carlo default).
        samples, seed: sample count and seed (ignored by ``analytic``).
    """
    size_bytes = check_write_size(size_bytes)
    samples = check_samples(samples)  # a bad count is refused whichever method ignores it
    p = link.chunk_drop(drop, drop_unit)
    ideal = link.ideal_time_s(size_bytes)
    params = spec.params(link)
    fallback = analytic.ec_fallback_probability(link, size_bytes, p, spec) if spec.is_ec else None
    bound = analytic.ec_mean_bound(link, size_bytes, p, spec) if spec.is_ec else None
    common = dict(
        scheme=spec.name,
        params=params,
        method=method,
        size_bytes=int(size_bytes),
        chunk_drop_probability=p,
        ideal_s=ideal,
        fallback_probability=fallback,
        mean_bound_s=bound,
    )
    if method == "des":
        from sdr.simulator.des import packet_loss
        from sdr.simulator.des_estimate import estimate_des

        loss = packet_loss(link, drop, drop_unit)
        return estimate_des(link, size_bytes, loss, spec, samples=samples, seed=seed)
    if method == "analytic":
        qs = {
            name: analytic.scheme_quantile(q, link, size_bytes, p, spec)
            for name, q in QUANTILES.items()
        }
        mean = analytic.scheme_mean(link, size_bytes, p, spec)
        return Estimate(
            mean_s=mean,
            p50_s=qs["p50"],
            p99_s=qs["p99"],
            p999_s=qs["p999"],
            quantile_method="analytic-cdf",
            analytic_mean_s=mean,
            analytic_p999_s=qs["p999"],
            **common,  # type: ignore[arg-type]
        )
    if method != "montecarlo":
        raise ConfigError(f"method must be 'analytic', 'montecarlo' or 'des', got {method!r}")
    rng = np.random.default_rng(seed)
    times, fell_back = sample_scheme(rng, link, size_bytes, p, spec, samples)
    summary = summarize(times)
    log.debug("sampled %d completion times of %s", samples, spec.name)
    extra: dict[str, Any] = {}
    if fell_back is not None:
        extra["sampled_fallback_fraction"] = float(np.mean(fell_back))
    return Estimate(
        quantile_method="montecarlo",
        samples=samples,
        seed=seed,
        **summary.estimate_fields(),
        analytic_mean_s=analytic.scheme_mean(link, size_bytes, p, spec),
        analytic_p999_s=analytic.scheme_quantile(0.999, link, size_bytes, p, spec),
        extra=extra,
        **common,  # type: ignore[arg-type]
    )


def evaluate_loss_model(
    link: Link,
    size_bytes: int,
    model: LossModel,
    spec: SchemeSpec,
    *,
    samples: int = 2_000,
    seed: int | None = 0,
) -> Estimate:
    """Monte Carlo completion time under any packet loss model (bursts, traces).

    Draws every packet (:mod:`sdr.simulator.montecarlo_trace`), so it is slow for large writes.
    ``analytic_*`` fields give the i.i.d. link with the same long-run packet loss rate, for
    comparison (``extra["analytic_is_iid_equivalent"]``); ``fallback_probability`` is the
    sampled fraction of EC writes that needed the SR fallback.
    """
    size_bytes = check_write_size(size_bytes)
    samples = check_samples(samples)
    rng = np.random.default_rng(seed)
    if spec.is_ec:
        times, fell_back = sample_ec_trace(rng, link, size_bytes, model, spec, samples)
        fallback: float | None = float(np.mean(fell_back))
    else:
        times, fallback = sample_sr_trace(rng, link, size_bytes, model, spec, samples), None
    summary = summarize(times)
    p_iid = link.chunk_drop(model.mean_rate(link.mtu), "packet")
    return Estimate(
        scheme=spec.name,
        params=spec.params(link),
        method="montecarlo",
        size_bytes=int(size_bytes),
        chunk_drop_probability=p_iid,
        ideal_s=link.ideal_time_s(size_bytes),
        fallback_probability=fallback,
        quantile_method="montecarlo",
        samples=samples,
        seed=seed,
        **summary.estimate_fields(),
        analytic_mean_s=analytic.scheme_mean(link, size_bytes, p_iid, spec),
        analytic_p999_s=analytic.scheme_quantile(0.999, link, size_bytes, p_iid, spec),
        extra={"loss_model": type(model).__name__, "analytic_is_iid_equivalent": True},
    )
