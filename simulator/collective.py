"""Ring allreduce across N datacenters with sampled per-stage write times.

A ring allreduce of ``size`` bytes over ``N`` datacenters runs ``2N - 2`` stages
(reduce-scatter then allgather); in each stage every datacenter writes ``size / N`` bytes to
its ring successor. Datacenter ``i`` can start stage ``r`` once it has finished its own stage
``r - 1`` write and received its predecessor's stage ``r - 1`` write:

    T(i, r) = max(T(i-1, r-1), T(i, r-1)) + t(i, r),

with ``t(i, r)`` an independent sample of the scheme's completion time for one stage write.
The allreduce finishes at ``max_i T(i, 2N-3)``. Since ``T >= sum of one chain``, the mean is
at least ``(2N - 2) * E[t]`` (the paper's bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator import analytic
from sdr.simulator.link import DropUnit, Link
from sdr.simulator.montecarlo import sample_scheme
from sdr.simulator.schemes import SchemeSpec
from sdr.simulator.stats import SampleSummary, summarize

__all__ = ["RingResult", "ring_stage_size", "ring_completion", "simulate_ring_allreduce"]


def ring_stage_size(size_bytes: int, dcs: int) -> int:
    """Bytes each datacenter writes per stage: ``ceil(size / N)``."""
    if dcs < 2:
        raise ConfigError(f"a ring allreduce needs >= 2 datacenters, got {dcs!r}")
    return -(-int(size_bytes) // dcs)


def ring_completion(stage_times: np.ndarray) -> np.ndarray:
    """Completion times from per-stage write times of shape ``(samples, N, stages)``.

    Applies ``T(i, r) = max(T(i-1, r-1), T(i, r-1)) + t(i, r)`` with ``T(., -1) = 0``
    and returns ``max_i T(i, last)`` per sample.
    """
    if stage_times.ndim != 3:
        raise ConfigError(
            f"stage times must have shape (samples, N, stages), got {stage_times.shape}"
        )
    finish = np.zeros(stage_times.shape[:2])
    for r in range(stage_times.shape[2]):
        ready = finish if r == 0 else np.maximum(np.roll(finish, 1, axis=1), finish)
        finish = ready + stage_times[:, :, r]
    return finish.max(axis=1)


@dataclass(frozen=True)
class RingResult:
    """Sampled allreduce completion times of one scheme (seconds)."""

    scheme: str
    dcs: int
    stages: int
    stage_size_bytes: int
    summary: SampleSummary
    stage_mean_s: float
    lower_bound_s: float
    ideal_s: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary."""
        s = self.summary
        return {
            "scheme": self.scheme,
            "dcs": self.dcs,
            "stages": self.stages,
            "stage_size_bytes": self.stage_size_bytes,
            "mean_s": s.mean,
            "p50_s": s.quantiles["p50"],
            "p99_s": s.quantiles["p99"],
            "p999_s": s.quantiles["p999"],
            "p999_ci_s": list(s.quantile_cis["p999"]),
            "stage_mean_s": self.stage_mean_s,
            "lower_bound_s": self.lower_bound_s,
            "ideal_s": self.ideal_s,
            "slowdown_mean": s.mean / self.ideal_s,
            "slowdown_p999": s.quantiles["p999"] / self.ideal_s,
        }


def simulate_ring_allreduce(
    link: Link,
    size_bytes: int,
    dcs: int,
    drop: float,
    spec: SchemeSpec,
    *,
    drop_unit: DropUnit = "chunk",
    samples: int = 10_000,
    seed: int | None = 0,
) -> RingResult:
    """Monte Carlo ring allreduce of ``size_bytes`` over ``dcs`` datacenters with ``spec``."""
    stage_size = ring_stage_size(size_bytes, dcs)
    stages = 2 * dcs - 2
    p = link.chunk_drop(drop, drop_unit)
    rng = np.random.default_rng(seed)
    draws, _ = sample_scheme(rng, link, stage_size, p, spec, samples * dcs * stages)
    completion = ring_completion(draws.reshape(samples, dcs, stages))
    stage_mean = analytic.scheme_mean(link, stage_size, p, spec)
    return RingResult(
        scheme=spec.name,
        dcs=dcs,
        stages=stages,
        stage_size_bytes=stage_size,
        summary=summarize(completion),
        stage_mean_s=stage_mean,
        lower_bound_s=stages * stage_mean,
        ideal_s=stages * link.ideal_time_s(stage_size),
    )
