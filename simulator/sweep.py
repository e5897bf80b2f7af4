"""Parameter sweeps: sizes x drop rates x schemes (x distances, bandwidths).

Every grid point carries its own seed (derived from the sweep seed and the point's index
with :class:`numpy.random.SeedSequence`), so a point's row is the same whichever executor
runs it: in this process (``serial``), in local worker processes (``local``, the default) or
on a Dask cluster (``dask``).
"""

from __future__ import annotations

import csv
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sdr.errors import ConfigError
from simulator.evaluate import evaluate
from simulator.link import PAPER_PROPAGATION_SPEED, Link
from simulator.schemes import SCHEMES, SchemeSpec

__all__ = ["SweepPoint", "make_grid", "run_point", "run_sweep", "write_csv", "read_csv"]

log = logging.getLogger(__name__)

Progress = Callable[[int], None]


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
    spec = SchemeSpec(point.scheme, rto_rtts=point.rto_rtts, k=point.k, m=point.m)
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


def _batches(points: Sequence[SweepPoint], size: int) -> list[tuple[int, list[SweepPoint]]]:
    return [(i, list(points[i : i + size])) for i in range(0, len(points), size)]


def run_sweep(
    points: Sequence[SweepPoint],
    *,
    executor: str = "local",
    workers: int | None = None,
    scheduler: str | None = None,
    client: Any = None,
    batch_size: int = 8,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Evaluate every point and return the rows in the order of ``points``.

    Args:
        executor: ``"local"`` (worker processes), ``"serial"`` (this process) or ``"dask"``.
        workers: local worker processes (default: CPU count).
        scheduler: Dask scheduler address (``"tcp://host:8786"``) for ``executor="dask"``.
        client: an existing ``distributed.Client`` to use instead of ``scheduler``.
        progress: called with the number of points finished by each completed batch.
    """
    rows: list[dict[str, Any] | None] = [None] * len(points)
    batches = _batches(points, max(1, batch_size))

    def done(start: int, result: list[dict[str, Any]]) -> None:
        rows[start : start + len(result)] = result
        if progress:
            progress(len(result))

    if executor == "serial" or (executor == "local" and (workers == 1 or len(batches) == 1)):
        for start, batch in batches:
            done(start, run_batch(batch))
    elif executor == "local":
        n = workers or os.cpu_count() or 1
        with ProcessPoolExecutor(max_workers=n) as pool:
            futures = {pool.submit(run_batch, batch): start for start, batch in batches}
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
    elif executor == "dask":
        _run_dask(batches, done, scheduler, client)
    else:
        raise ConfigError(f"executor must be 'local', 'serial' or 'dask', got {executor!r}")
    log.info("sweep finished: %d points", len(points))
    return [r for r in rows if r is not None]


def _run_dask(batches, done, scheduler: str | None, client: Any) -> None:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError as exc:  # pragma: no cover - dask is a listed dependency
        raise ConfigError(
            "executor 'dask' needs dask[distributed]: pip install 'dask[distributed]'"
        ) from exc
    own = client is None
    if own:
        if not scheduler:
            raise ConfigError(
                "executor 'dask' needs a scheduler address (--scheduler tcp://HOST:8786)"
            )
        client = Client(scheduler)
    try:
        futures = [client.submit(run_batch, batch, pure=False) for _, batch in batches]
        starts = {fut.key: start for fut, (start, _) in zip(futures, batches, strict=True)}
        for fut in dask_completed(futures):
            done(starts[fut.key], fut.result())
    finally:
        if own:
            client.close()


_INT_FIELDS = {"size_bytes", "chunk_size", "mtu", "k", "m", "samples", "seed"}
_STR_FIELDS = {"scheme", "drop_unit", "method", "quantile_method"}


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write sweep rows to CSV (empty cells for ``None``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not rows:
        raise ConfigError("no rows to write")
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return path


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Read rows written by :func:`write_csv`, converting numbers back."""
    out = []
    with Path(path).open(newline="") as fh:
        for raw in csv.DictReader(fh):
            row: dict[str, Any] = {}
            for key, value in raw.items():
                if value == "":
                    row[key] = None
                elif key in _STR_FIELDS:
                    row[key] = value
                elif key in _INT_FIELDS:
                    row[key] = int(value)
                else:
                    row[key] = float(value)
            out.append(row)
    return out
