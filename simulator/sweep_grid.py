"""The points of a parameter sweep and the evaluation of one point.

Every grid point carries its own seed (derived from the sweep seed and the point's index
with :class:`numpy.random.SeedSequence`), so a point's row is the same whichever executor
runs it (:mod:`sdr.simulator.sweep_executors`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import PAPER_PROPAGATION_SPEED, Link
from sdr.simulator.schemes import SCHEMES, SchemeSpec

__all__ = ["SweepPoint", "make_grid", "run_batch", "run_point"]


@dataclass(frozen=True)
class SweepPoint:
    """One configuration to evaluate; ``seed`` makes its Monte Carlo run reproducible."""

    scheme: str
    size_bytes: int
    drop: float
    bandwidth_bps: float
    rtt_s: float
    distance_m: float | None
    drop_unit: str = "chunk"
    chunk_size: int = 65536
    mtu: int = 4096
    alpha: float = 2.0
    k: int = 32
    m: int = 8
    rto_rtts: float | None = None
    method: str = "montecarlo"
    samples: int = 1000
    seed: int = 0
    fallback: str = "protocol"
    """EC fallback model: ``"protocol"`` (the SDK's repair) or ``"paper"`` (the paper's)."""


def make_grid(
    sizes: Iterable[int],
    drops: Iterable[float],
    schemes: Iterable[str] = SCHEMES,
    *,
    bandwidths: Iterable[float] = (400e9,),
    rtts: Iterable[float] | None = None,
    distances: Iterable[float] | None = None,
    propagation_speed_mps: float = PAPER_PROPAGATION_SPEED,
    seed: int = 0,
    **fixed: Any,
) -> list[SweepPoint]:
    """The cartesian grid, one :class:`SweepPoint` per combination, with per-point seeds.

    Give either ``rtts`` (seconds) or ``distances`` (metres); the default is 3750 km.
    ``fixed`` sets the remaining :class:`SweepPoint` fields (chunk_size, k, m, samples ...).
    """
    if rtts is not None and distances is not None:
        raise ConfigError("give either RTTs or distances for a sweep, not both")
    if rtts is not None:
        paths = [(float(r), None) for r in rtts]
    else:
        dists = list(distances) if distances is not None else [3.75e6]
        paths = [(2.0 * d / propagation_speed_mps, float(d)) for d in dists]
    combos = itertools.product(list(bandwidths), paths, list(sizes), list(drops), list(schemes))
    points = []
    for index, (bw, (rtt, dist), size, drop, scheme) in enumerate(combos):
        point_seed = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
        points.append(
            SweepPoint(
                scheme=scheme,
                size_bytes=int(size),
                drop=float(drop),
                bandwidth_bps=float(bw),
                rtt_s=rtt,
                distance_m=dist,
                seed=point_seed,
                **fixed,
            )
        )
    return points


def run_point(point: SweepPoint) -> dict[str, Any]:
    """Evaluate one grid point; returns a flat row (the point's fields plus the results)."""
    link = Link(point.bandwidth_bps, point.rtt_s, point.mtu, point.chunk_size, point.alpha)
    spec = SchemeSpec(
        point.scheme,
        rto_rtts=point.rto_rtts,
        k=point.k,
        m=point.m,
        fallback=point.fallback,  # type: ignore[arg-type]
    )
    est = evaluate(
        link,
        point.size_bytes,
        point.drop,
        spec,
        drop_unit=point.drop_unit,  # type: ignore[arg-type]
        method=point.method,  # type: ignore[arg-type]
        samples=point.samples,
        seed=point.seed,
    )
    row = asdict(point)
    ci = est.p999_ci_s or (None, None)
    row.update(
        chunk_drop_probability=est.chunk_drop_probability,
        mean_s=est.mean_s,
        p50_s=est.p50_s,
        p99_s=est.p99_s,
        p999_s=est.p999_s,
        p999_ci_lo_s=ci[0],
        p999_ci_hi_s=ci[1],
        ideal_s=est.ideal_s,
        slowdown_mean=est.slowdown_mean,
        slowdown_p999=est.slowdown_p999,
        fallback_probability=est.fallback_probability,
        analytic_mean_s=est.analytic_mean_s,
        analytic_p999_s=est.analytic_p999_s,
        quantile_method=est.quantile_method,
    )
    return row


def run_batch(points: Sequence[SweepPoint]) -> list[dict[str, Any]]:
    """Evaluate several points in one task (amortizes per-task overhead)."""
    return [run_point(p) for p in points]
