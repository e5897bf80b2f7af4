"""Running a sweep's points: in this process, in local worker processes or on Dask.

Points go out in batches (amortizing per-task overhead); rows come back in completion order
through callbacks and are returned in grid order.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from sdr.errors import ConfigError
from sdr.simulator.sweep_grid import SweepPoint, run_batch

__all__ = ["Progress", "RowSink", "run_sweep"]

log = logging.getLogger(__name__)

Progress = Callable[[int], None]
RowSink = Callable[[list[dict[str, Any]]], None]


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
    """Worker initializer: Ctrl-C and SIGTERM (to the whole process group too) are the
    parent's to handle: it keeps the finished rows and then stops the workers (SIGKILL)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


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
            proc.kill()  # workers ignore SIGTERM
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
