"""Parameter sweeps: sizes x drop rates x schemes (x distances, bandwidths).

Every grid point carries its own seed (derived from the sweep seed and the point's index
with :class:`numpy.random.SeedSequence`), so a point's row is the same whichever executor
runs it: in this process (``serial``), in local worker processes (``local``, the default) or
on a Dask cluster (``dask``).

:func:`sweep_to_csv` streams the rows to a CSV as the points finish (appended and flushed
per batch), so an interrupted sweep keeps every finished row, and ``resume=True`` skips the
points an existing output already holds.
"""

from __future__ import annotations

import csv
import itertools
import logging
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import PAPER_PROPAGATION_SPEED, Link
from sdr.simulator.schemes import SCHEMES, SchemeSpec

__all__ = [
    "SweepInterrupted",
    "SweepPoint",
    "make_grid",
    "read_csv",
    "run_point",
    "run_sweep",
    "sweep_to_csv",
    "write_csv",
]

log = logging.getLogger(__name__)

Progress = Callable[[int], None]
RowSink = Callable[[list[dict[str, Any]]], None]


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
    on_rows: RowSink | None = None,
) -> list[dict[str, Any]]:
    """Evaluate every point and return the rows in the order of ``points``.

    Args:
        executor: ``"local"`` (worker processes), ``"serial"`` (this process) or ``"dask"``.
        workers: local worker processes (default: CPU count).
        scheduler: Dask scheduler address (``"tcp://host:8786"``) for ``executor="dask"``.
        client: an existing ``distributed.Client`` to use instead of ``scheduler``.
        progress: called with the number of points finished by each completed batch.
        on_rows: called with each completed batch's rows as it finishes (before
            ``progress``), in completion order; :func:`sweep_to_csv` writes them out here.

    An exception from a callback (a ``KeyboardInterrupt`` too) stops the sweep: queued
    batches are cancelled and local workers stopped before it propagates.
    """
    rows: list[dict[str, Any] | None] = [None] * len(points)
    batches = _batches(points, max(1, batch_size))

    def done(start: int, result: list[dict[str, Any]]) -> None:
        rows[start : start + len(result)] = result
        if on_rows:
            on_rows(result)
        if progress:
            progress(len(result))

    if executor == "serial" or (executor == "local" and (workers == 1 or len(batches) == 1)):
        for start, batch in batches:
            done(start, run_batch(batch))
    elif executor == "local":
        _run_local(batches, done, workers or os.cpu_count() or 1)
    elif executor == "dask":
        _run_dask(batches, done, scheduler, client)
    else:
        raise ConfigError(f"executor must be 'local', 'serial' or 'dask', got {executor!r}")
    log.info("sweep finished: %d points", len(points))
    return [r for r in rows if r is not None]


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_local(batches, done, workers: int) -> None:
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint)
    try:
        futures = {pool.submit(run_batch, batch): start for start, batch in batches}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())
    except BaseException:
        # Do not wait for the queued batches (nor for the running ones) on an interrupt.
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            proc.terminate()
        raise
    pool.shutdown(wait=True)


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
        try:
            for fut in dask_completed(futures):
                done(starts[fut.key], fut.result())
        except BaseException:
            client.cancel(futures)
            raise
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


_POINT_FIELDS = [f.name for f in fields(SweepPoint)]


class SweepInterrupted(KeyboardInterrupt):  # noqa: N818 - it is a KeyboardInterrupt
    """A :func:`sweep_to_csv` stopped by Ctrl-C (or a callback's ``KeyboardInterrupt``).

    Attributes:
        finished: points in the output now (earlier runs' rows included).
        total: points in the grid.
        path: the output file, or ``None`` for a stream.
    """

    def __init__(self, finished: int, total: int, path: Path | None) -> None:
        super().__init__(f"sweep interrupted: {finished} of {total} points finished")
        self.finished = finished
        self.total = total
        self.path = path


def point_key(values: SweepPoint | dict[str, Any]) -> tuple[Any, ...]:
    """The grid parameters of a point or row (every :class:`SweepPoint` field, seed included).

    Values are normalized as :func:`read_csv` reads them back, so a point and its row read
    from a CSV have the same key.
    """
    d = asdict(values) if isinstance(values, SweepPoint) else values
    key: list[Any] = []
    for name in _POINT_FIELDS:
        v = d.get(name)
        if v is None or v == "":
            key.append(None)
        elif name in _STR_FIELDS:
            key.append(str(v))
        elif name in _INT_FIELDS:
            key.append(int(v))
        else:
            key.append(float(v))
    return tuple(key)


def _drop_partial_line(path: Path) -> None:
    """Cut a last line that a kill left half written (the file then ends with a newline)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def _finished_rows(path: Path, points: Sequence[SweepPoint]) -> list[dict[str, Any]]:
    """The rows of an earlier run of this grid in ``path``; ConfigError if some do not fit."""
    _drop_partial_line(path)
    if not path.read_bytes().strip():
        return []
    try:
        rows = read_csv(path)
    except (ValueError, csv.Error) as exc:
        raise ConfigError(f"cannot resume from {path}: not a sweep CSV ({exc})") from None
    if rows and not set(_POINT_FIELDS) <= set(rows[0]):
        missing = sorted(set(_POINT_FIELDS) - set(rows[0]))
        raise ConfigError(f"cannot resume from {path}: not a sweep CSV (no {', '.join(missing)})")
    wanted = {point_key(p) for p in points}
    foreign = [r for r in rows if point_key(r) not in wanted]
    if foreign:
        raise ConfigError(
            f"cannot resume from {path}: {len(foreign)} of its {len(rows)} rows are not points of "
            "this sweep (different grid, seed or options?); overwrite it (force, --force) "
            "or write elsewhere"
        )
    return rows


def _header(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return next(csv.reader(fh), [])


def sweep_to_csv(
    points: Sequence[SweepPoint],
    out: str | Path | TextIO,
    *,
    resume: bool = False,
    **run_kwargs: Any,
) -> list[dict[str, Any]]:
    """Run :func:`run_sweep` writing each finished batch's rows to ``out`` at once.

    Rows are appended and flushed as batches finish, so an interrupt (Ctrl-C, a kill) keeps
    every finished row; a ``KeyboardInterrupt`` is re-raised as :class:`SweepInterrupted`
    with the count. When the sweep completes, a file is rewritten (atomically) in grid order.

    Args:
        out: a file path (overwritten unless ``resume``) or a text stream such as
            ``sys.stdout`` (rows in completion order).
        resume: keep the rows an existing ``out`` file already holds and evaluate only the
            missing points (matched on :func:`point_key`). ConfigError if the file holds rows
            of another grid.
        run_kwargs: passed to :func:`run_sweep` (executor, workers, progress ...); when
            resuming, ``progress`` is first called with the number of rows kept.

    Returns:
        All rows of the grid, earlier runs' included, in the order of ``points``.
    """
    stream = None if isinstance(out, str | Path) else out
    path = None if stream is not None else Path(out)  # type: ignore[arg-type]
    if resume and path is None:
        raise ConfigError("resume needs an output file, not a stream")
    earlier: list[dict[str, Any]] = []
    if path is not None and resume and path.exists():
        earlier = _finished_rows(path, points)
    have = {point_key(r) for r in earlier}
    todo = [p for p in points if point_key(p) not in have]
    log.info("sweep: %d points, %d already in the output", len(points), len(points) - len(todo))

    fh: TextIO
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = path.open("a" if earlier else "w", newline="")
        fieldnames = _header(path) if earlier else None
    else:
        fh = stream  # type: ignore[assignment]
        fieldnames = None
    state: dict[str, Any] = {"writer": None, "written": 0}

    def write(rows: list[dict[str, Any]]) -> None:
        if state["writer"] is None:
            names = fieldnames or list(rows[0])
            if names != list(rows[0]):
                raise ConfigError(f"cannot resume: the columns of {path} differ from this sweep's")
            state["writer"] = csv.DictWriter(fh, fieldnames=names)
            if not fieldnames:
                state["writer"].writeheader()
        for row in rows:
            state["writer"].writerow({k: "" if v is None else v for k, v in row.items()})
        fh.flush()
        state["written"] += len(rows)

    progress = run_kwargs.get("progress")
    try:
        if progress and earlier:
            progress(len(points) - len(todo))
        new = run_sweep(todo, on_rows=write, **run_kwargs) if todo else []
    except KeyboardInterrupt:
        raise SweepInterrupted(len(earlier) + state["written"], len(points), path) from None
    finally:
        if path is not None:
            fh.close()
    by_key = {point_key(r): r for r in [*earlier, *new]}
    rows = [by_key[point_key(p)] for p in points]
    if path is not None and rows:
        tmp = path.with_name(path.name + ".tmp")
        write_csv(rows, tmp)
        os.replace(tmp, path)
    return rows
