"""Parameter sweeps: sizes x drop rates x schemes (x distances, bandwidths).

Every grid point carries its own seed (derived from the sweep seed and the point's index
with :class:`numpy.random.SeedSequence`), so a point's row is the same whichever executor
runs it: in this process (``serial``), in local worker processes (``local``, the default) or
on a Dask cluster (``dask``).

:func:`sweep_to_csv` streams the rows to a CSV as the points finish (appended and flushed
per batch), so an interrupted sweep keeps every finished row, and ``resume=True`` skips the
points an existing output already holds.

The parts: the grid and one point's evaluation (:mod:`sdr.simulator.sweep_grid`), the
executors (:mod:`sdr.simulator.sweep_executors`) and the CSV output
(:mod:`sdr.simulator.sweep_csv`); every public name is importable from here.
"""

from __future__ import annotations

from sdr.simulator.sweep_csv import (
    SweepInterrupted,
    point_key,
    read_csv,
    sweep_to_csv,
    write_csv,
)
from sdr.simulator.sweep_executors import Progress, RowSink, run_sweep
from sdr.simulator.sweep_grid import SweepPoint, make_grid, run_batch, run_point

__all__ = [
    "Progress",
    "RowSink",
    "SweepInterrupted",
    "SweepPoint",
    "make_grid",
    "point_key",
    "read_csv",
    "run_batch",
    "run_point",
    "run_sweep",
    "sweep_to_csv",
    "write_csv",
]
