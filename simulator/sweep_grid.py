"""The points of a parameter sweep and the evaluation of one point.

Every grid point carries its own seed (derived from the sweep seed and the point's index
with :class:`numpy.random.SeedSequence`), so a point's row is the same whichever executor
runs it (:mod:`sdr.simulator.sweep_executors`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, overload

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator.bounds import check_drop, check_grid_points, check_samples, check_write_size
from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import DEFAULT_RATE, PAPER_PROPAGATION_SPEED, Link
from sdr.simulator.schemes import SCHEMES, SchemeSpec

__all__ = ["SweepGrid", "SweepPoint", "make_grid", "run_batch", "run_point"]


@dataclass(frozen=True)
class SweepPoint:
    """One configuration to evaluate; ``seed`` makes its Monte Carlo run reproducible.

    The link's quantities have the names of :class:`~sdr.simulator.link.Link` and of the
    sweep's options: ``rate`` (bits/s), ``rtt`` (s), ``distance`` (m, or None when the
    RTT was given); each field is a column of the sweep's rows.
    """

    scheme: str
    size_bytes: int
    drop: float
    rate: float
    rtt: float
    distance: float | None
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


class SweepGrid(Sequence[SweepPoint]):
    """The cartesian grid of a sweep, built point by point as it is read (never all at once).

    Indexing and iteration compute a point from its index (``schemes`` varying fastest, then
    drops, sizes, paths, rates), so a grid of many points costs memory only for the
    points in use, and the first batch can run before the last point exists.
    """

    def __init__(
        self,
        axes: tuple[
            list[float], list[tuple[float, float | None]], list[int], list[float], list[str]
        ],
        seed: int,
        fixed: dict[str, Any],
    ) -> None:
        self._axes = axes
        self._seed = seed
        self._fixed = fixed
        self._len = math.prod(len(a) for a in axes)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> SweepPoint: ...
    @overload
    def __getitem__(self, index: slice) -> list[SweepPoint]: ...
    def __getitem__(self, index: int | slice) -> SweepPoint | list[SweepPoint]:
        if isinstance(index, slice):
            return [self._point(i) for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"grid index {index} out of range ({self._len} points)")
        return self._point(index)

    def __iter__(self) -> Iterator[SweepPoint]:
        for index in range(self._len):
            yield self._point(index)

    def _point(self, index: int) -> SweepPoint:
        picked = []  # each axis's position, ``schemes`` first (it varies fastest)
        rest = index
        for axis in reversed(self._axes):
            rest, i = divmod(rest, len(axis))
            picked.append(i)
        i_scheme, i_drop, i_size, i_path, i_rate = picked
        rates, paths, sizes, drops, schemes = self._axes
        rtt, distance = paths[i_path]
        point_seed = int(np.random.SeedSequence([self._seed, index]).generate_state(1)[0])
        return SweepPoint(
            scheme=schemes[i_scheme],
            size_bytes=sizes[i_size],
            drop=drops[i_drop],
            rate=rates[i_rate],
            rtt=rtt,
            distance=distance,
            seed=point_seed,
            **self._fixed,
        )


def make_grid(
    sizes: Iterable[int],
    drops: Iterable[float],
    schemes: Iterable[str] = SCHEMES,
    *,
    rates: Iterable[float] = (DEFAULT_RATE,),
    rtts: Iterable[float] | None = None,
    distances: Iterable[float] | None = None,
    propagation_speed: float = PAPER_PROPAGATION_SPEED,
    seed: int = 0,
    **fixed: Any,
) -> SweepGrid:
    """The cartesian grid, one :class:`SweepPoint` per combination, with per-point seeds.

    ``rates`` are line rates in bits/s (default 1 Gbit/s, :data:`~sdr.simulator.link.
    DEFAULT_RATE`). Give either ``rtts`` (seconds) or ``distances`` (metres, at
    ``propagation_speed`` m/s); the default is 3750 km.
    ``fixed`` sets the remaining :class:`SweepPoint` fields (chunk_size, k, m, samples ...).
    Every value is checked here, before any point runs, and the grid is refused past
    :data:`~sdr.simulator.bounds.MAX_GRID_POINTS` (ConfigError, one line); the points are
    built lazily (:class:`SweepGrid`).
    """
    if rtts is not None and distances is not None:
        raise ConfigError("give either RTTs or distances for a sweep, not both")
    rates, sizes, drops, schemes = list(rates), list(sizes), list(drops), list(schemes)
    rtts = list(rtts) if rtts is not None else None
    dists = list(distances) if distances is not None else [3.75e6] if rtts is None else []
    n_paths = len(rtts) if rtts is not None else len(dists)
    total = len(rates) * n_paths * len(sizes) * len(drops) * len(schemes)
    if total == 0:
        raise ConfigError("the sweep is empty: give at least one value of every list")
    check_grid_points(total)
    defaults = SweepPoint("sr-rto", 1, 0.0, 1.0, 0.0, None)
    chunk, mtu = fixed.get("chunk_size", defaults.chunk_size), fixed.get("mtu", defaults.mtu)
    alpha = fixed.get("alpha", defaults.alpha)
    if "samples" in fixed:
        check_samples(fixed["samples"])
    for scheme in schemes:  # the scheme's name and parameters, as each point will build it
        SchemeSpec(
            str(scheme),
            rto_rtts=fixed.get("rto_rtts"),
            k=fixed.get("k", defaults.k),
            m=fixed.get("m", defaults.m),
        )
    link_fields = dict(mtu=mtu, chunk_size=chunk, alpha=alpha)
    paths: list[tuple[float, float | None]] = []
    for value in rtts if rtts is not None else dists:  # each through Link's checks
        if rtts is not None:
            paths.append((Link(1.0, float(value), **link_fields).rtt, None))
        else:
            link = Link.from_distance(
                float(value), 1.0, propagation_speed=propagation_speed, **link_fields
            )
            paths.append((link.rtt, float(value)))
    for rate in rates:
        Link(float(rate), 0.0, **link_fields)
    axes = (
        [float(r) for r in rates],
        paths,
        [check_write_size(s) for s in sizes],
        [check_drop(d) for d in drops],
        [str(s) for s in schemes],
    )
    return SweepGrid(axes, seed, fixed)


def run_point(point: SweepPoint) -> dict[str, Any]:
    """Evaluate one grid point; returns a flat row (the point's fields plus the results)."""
    link = Link(point.rate, point.rtt, point.mtu, point.chunk_size, point.alpha)
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
