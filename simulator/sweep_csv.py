"""Sweep rows as CSV or JSON Lines: written as the points finish, read back, and resumed.

:func:`sweep_to_csv` streams the rows to a CSV (or, with ``fmt="jsonl"``, one JSON object
per line) as the points finish (appended and flushed per batch), so an interrupted sweep
keeps every finished row, and ``resume=True`` skips the points an existing output already
holds. ``fmt="parquet"`` (needs pyarrow) streams to a CSV beside the output and writes the
Parquet file when the sweep completes.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TextIO

from sdr.errors import ConfigError
from sdr.simulator.sweep_executors import run_sweep
from sdr.simulator.sweep_grid import SweepPoint

__all__ = [
    "FORMATS",
    "SweepInterrupted",
    "format_for",
    "partial_path",
    "point_key",
    "read_csv",
    "read_rows",
    "sweep_to_csv",
    "write_csv",
    "write_rows",
]

#: output formats of a sweep, and the file suffixes that imply them
FORMATS = {"csv": (".csv",), "jsonl": (".jsonl", ".ndjson"), "parquet": (".parquet", ".pq")}

log = logging.getLogger(__name__)

_INT_FIELDS = {"size_bytes", "chunk_size", "mtu", "k", "m", "samples", "seed"}
_STR_FIELDS = {"scheme", "drop_unit", "method", "quantile_method", "fallback"}


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


def format_for(path: str | Path | None, fmt: str | None = None) -> str:
    """The output format: ``fmt`` if given, else the one ``path``'s suffix implies, else csv.

    ConfigError for an unknown format, and for ``parquet`` without pyarrow installed.
    """
    if fmt is None:
        suffix = Path(path).suffix.lower() if path is not None else ""
        fmt = next((name for name, ends in FORMATS.items() if suffix in ends), "csv")
    if fmt not in FORMATS:
        raise ConfigError(f"sweep output format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(
                "Parquet output needs pyarrow, which is not installed: pip install pyarrow, "
                "or write csv or jsonl (--format csv|jsonl)"
            ) from None
    return fmt


def _json_row(row: dict[str, Any]) -> str:
    """One JSON line; an open interval bound (inf) is written as null, as JSON has no inf."""
    clean = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()
    }
    return json.dumps(clean)


def read_rows(path: str | Path, fmt: str | None = None) -> list[dict[str, Any]]:
    """Read rows written by :func:`write_rows` (or a sweep) in ``fmt`` (default: by suffix)."""
    fmt = format_for(path, fmt)
    if fmt == "csv":
        return read_csv(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with Path(path).open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_rows(rows: Sequence[dict[str, Any]], path: str | Path, fmt: str | None = None) -> Path:
    """Write sweep rows to ``path`` in ``fmt`` (csv, jsonl or parquet; default: by suffix)."""
    fmt = format_for(path, fmt)
    if fmt == "csv":
        return write_csv(rows, path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(list(rows)), path)
        return path
    with path.open("w") as fh:
        for row in rows:
            fh.write(_json_row(row) + "\n")
    return path


_POINT_FIELDS = [f.name for f in fields(SweepPoint)]


class SweepInterrupted(KeyboardInterrupt):  # noqa: N818 - it is a KeyboardInterrupt
    """A :func:`sweep_to_csv` stopped by Ctrl-C (or a callback's ``KeyboardInterrupt``).

    Attributes:
        finished: points in the output now (earlier runs' rows included); ``None`` when
            the sweep stopped before it had read its output to resume (left as it was).
        total: points in the grid.
        path: the output file, or ``None`` for a stream.
    """

    def __init__(self, finished: int | None, total: int, path: Path | None) -> None:
        done = "before it started" if finished is None else f"{finished} of {total} points finished"
        super().__init__(f"sweep interrupted: {done}")
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


def _finished_rows(path: Path, points: Sequence[SweepPoint], fmt: str) -> list[dict[str, Any]]:
    """The rows of an earlier run of this grid in ``path``; ConfigError if some do not fit."""
    _drop_partial_line(path)
    if not path.read_bytes().strip():
        return []
    try:
        rows = read_rows(path, fmt)
    except (ValueError, csv.Error) as exc:
        raise ConfigError(f"cannot resume from {path}: not a sweep {fmt} file ({exc})") from None
    if rows and not set(_POINT_FIELDS) <= set(rows[0]):
        missing = sorted(set(_POINT_FIELDS) - set(rows[0]))
        raise ConfigError(
            f"cannot resume from {path}: not a sweep {fmt} file (no {', '.join(missing)})"
        )
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


def partial_path(path: str | Path) -> Path:
    """Where a Parquet sweep streams its rows (as CSV) until it completes."""
    path = Path(path)
    return path.with_name(path.name + ".partial.csv")


def sweep_to_csv(
    points: Sequence[SweepPoint],
    out: str | Path | TextIO,
    *,
    resume: bool = False,
    fmt: str | None = None,
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
        fmt: ``"csv"``, ``"jsonl"`` (one JSON object per line) or ``"parquet"`` (streamed to
            :func:`partial_path` as CSV, written as Parquet on completion); default: by the
            suffix of ``out``, else csv.
        run_kwargs: passed to :func:`run_sweep` (executor, workers, progress ...); when
            resuming, ``progress`` is first called with the number of rows kept.

    Returns:
        All rows of the grid, earlier runs' included, in the order of ``points``.
    """
    stream = None if isinstance(out, str | Path) else out
    final = None if stream is not None else Path(out)  # type: ignore[arg-type]
    fmt = format_for(final, fmt)
    if fmt == "parquet" and final is None:
        raise ConfigError("Parquet output needs a file, not a stream")
    if resume and final is None:
        raise ConfigError("resume needs an output file, not a stream")
    # Parquet cannot be appended to: stream CSV beside it, convert when complete.
    path = partial_path(final) if fmt == "parquet" and final is not None else final
    live = "csv" if fmt == "parquet" else fmt
    earlier: list[dict[str, Any]] = []
    try:
        if path is not None and resume and path.exists():
            earlier = _finished_rows(path, points, live)
        have = {point_key(r) for r in earlier}
        # without earlier rows the grid itself is the work: its points are built as they run
        todo = [p for p in points if point_key(p) not in have] if have else points
    except KeyboardInterrupt:
        # before a row was written: the output is as it was, its rows not yet counted
        raise SweepInterrupted(None, len(points), path) from None
    log.info("sweep: %d points, %d already in the output", len(points), len(points) - len(todo))

    fh: TextIO
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = path.open("a" if earlier else "w", newline="")
        fieldnames = _header(path) if earlier and live == "csv" else None
    else:
        fh = stream  # type: ignore[assignment]
        fieldnames = None
    writer: csv.DictWriter[str] | None = None
    written = 0

    def write(rows: list[dict[str, Any]]) -> None:
        # A row is counted as soon as it is in the file's buffer, before the flush that
        # makes it visible: the buffer is flushed on close, so a Ctrl-C that lands right
        # after the flush (when a user sees the rows) cannot leave saved rows uncounted.
        nonlocal writer, written
        if live != "jsonl" and writer is None:
            names = fieldnames or list(rows[0])
            if names != list(rows[0]):
                raise ConfigError(f"cannot resume: the columns of {path} differ from this sweep's")
            writer = csv.DictWriter(fh, fieldnames=names)
            if not fieldnames:
                writer.writeheader()
        for row in rows:
            if writer is None:
                fh.write(_json_row(row) + "\n")
            else:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
            written += 1
        fh.flush()

    progress = run_kwargs.get("progress")
    try:
        if progress and earlier:
            progress(len(points) - len(todo))
        new = run_sweep(todo, on_rows=write, **run_kwargs) if todo else []
    except KeyboardInterrupt:
        raise SweepInterrupted(len(earlier) + written, len(points), path) from None
    finally:
        if path is not None:
            fh.close()
    by_key = {point_key(r): r for r in [*earlier, *new]}
    rows = [by_key[point_key(p)] for p in points]
    if final is not None and path is not None and rows:
        tmp = final.with_name(final.name + ".tmp")
        write_rows(rows, tmp, fmt)
        os.replace(tmp, final)
        if path != final:
            path.unlink()
    return rows
