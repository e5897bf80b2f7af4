"""Parameter sweeps: sizes x drop rates x schemes (x distances or RTTs, rates).

Every grid point carries its own seed (derived from the sweep seed and the point's index
with :class:`numpy.random.SeedSequence`), so a point's row is the same whichever executor
runs it: in this process (``serial``), in local worker processes (``local``, the default) or
on a Dask cluster (``dask``).

:func:`sweep_to_csv` streams the rows to a CSV or JSON Lines file as the points finish
(appended and flushed per batch), so an interrupted sweep keeps every finished row, and
``resume=True`` skips the points an existing output already holds.

The parts: the grid and one point's evaluation (:mod:`sdr.simulator.sweep_grid`), the
executors (:mod:`sdr.simulator.sweep_executors`) and the output, CSV, JSON Lines or
Parquet (:mod:`sdr.simulator.sweep_csv`); every public name is importable from here.
"""

from __future__ import annotations

from sdr.simulator.sweep_csv import (
    FORMATS,
    SweepInterrupted,
    format_for,
    partial_path,
    point_key,
    read_csv,
    read_rows,
    sweep_to_csv,
    write_csv,
    write_rows,
)
from sdr.simulator.sweep_executors import Progress, RowSink, run_sweep
from sdr.simulator.sweep_grid import SweepPoint, make_grid, run_batch, run_point

__all__ = [
    "FORMATS",
    "Progress",
    "RowSink",
    "SweepInterrupted",
    "SweepPoint",
    "format_for",
    "make_grid",
    "partial_path",
    "point_key",
    "read_csv",
    "read_rows",
    "run_batch",
    "run_point",
    "run_sweep",
    "sweep_to_csv",
    "write_csv",
    "write_rows",
]
