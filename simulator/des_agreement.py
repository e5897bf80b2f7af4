"""How far the completion-time model is from the discrete-event simulation of the protocol.

:func:`des_agreement` simulates ``writes`` writes (the real SDK code on simulated time)
and compares their mean with the analytic mean of the model under both EC fallback
models, as z-scores (difference over the simulated mean's standard error) and relative
differences. It also pairs every write with the model evaluated on that write's own
losses (:mod:`sdr.simulator.des_paired`, fallback writes included), so that the
documented protocol-vs-model differences and the residual left after them are numbers
with almost no sampling noise.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from sdr.simulator import analytic
from sdr.simulator.des import packet_loss, simulate_writes
from sdr.simulator.des_paired import expected_protocol_difference, paired_model_time
from sdr.simulator.ec_model import Fallback
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec

__all__ = ["des_agreement"]


def des_agreement(
    link: Link,
    size_bytes: int,
    spec: SchemeSpec,
    drop: float,
    *,
    writes: int = 200,
    seed: int = 11,
    known_samples: int = 4000,
) -> dict[str, Any]:
    """Simulated mean vs the model's at per-chunk loss ``drop`` (i.i.d.); times in seconds.

    Keys: ``des_mean_s``, ``des_se_s``, ``fallback_fraction``; per fallback model ``F``
    (``protocol``, ``paper``; EC only) ``model_F_s``, ``rel_F`` (simulated / model - 1) and
    ``z_F``; ``residual_s`` and ``residual_fallback_s``: mean of simulated minus the
    protocol-aware paired model (all writes, fallback writes), ``max_residual_tinj``;
    ``known_s``: the documented differences' expectation; ``estimate_s`` = model + known +
    residual, the control-variate estimate of the simulated mean, and ``z_estimate``.
    """
    run = simulate_writes(
        link, size_bytes, spec, packet_loss(link, drop), samples=writes, seed=seed
    )
    times = run.times_s
    se = float(times.std(ddof=1) / np.sqrt(len(times)))
    out: dict[str, Any] = {
        "writes": len(times),
        "failed": run.failed,
        "des_mean_s": float(times.mean()),
        "des_se_s": se,
        "fallback_fraction": float(np.mean(run.fell_back)) if run.fell_back is not None else None,
    }
    models: tuple[Fallback, ...] = ("protocol", "paper") if spec.is_ec else ("protocol",)
    for fallback in models:
        mean = analytic.scheme_mean(link, size_bytes, drop, replace(spec, fallback=fallback))
        out[f"model_{fallback}_s"] = mean
        out[f"rel_{fallback}"] = float(times.mean() / mean - 1.0)
        out[f"z_{fallback}"] = float((times.mean() - mean) / se)
    paired = np.array(
        [
            paired_model_time(link, size_bytes, spec, z, zp, protocol=True)
            for z, zp in run.chunk_losses
        ]
    )
    gap = times - paired
    fell = run.fell_back if run.fell_back is not None else np.zeros(len(times), dtype=bool)
    out["residual_s"] = float(gap.mean())
    out["residual_fallback_s"] = float(gap[fell].mean()) if fell.any() else None
    out["max_residual_tinj"] = float(np.abs(gap).max() / link.t_inj_s)
    known = expected_protocol_difference(link, size_bytes, spec, drop, samples=known_samples)
    estimate = out[f"model_{spec.fallback}_s"] + known + out["residual_s"]
    out.update(known_s=known, estimate_s=estimate, z_estimate=(times.mean() - estimate) / se)
    return out
