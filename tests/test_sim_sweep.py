"""Sweeps: grid, seeds, executors (serial, local processes, Dask) and CSV round trip."""

from __future__ import annotations

import pytest

from sdr.errors import ConfigError
from sdr.simulator.sweep import make_grid, read_csv, run_sweep, write_csv

SIZES = [128 * 1024, 8 * 2**20]
DROPS = [1e-4, 1e-2]
SCHEMES = ["sr-rto", "sr-nack", "ec-mds", "ec-xor"]


def _grid():
    return make_grid(SIZES, DROPS, SCHEMES, distances=[3.75e6, 7.5e6], samples=300, seed=5)


def test_grid_shape_and_seeds() -> None:
    points = _grid()
    assert len(points) == 2 * 2 * 2 * 4
    assert len({p.seed for p in points}) == len(points)
    assert [p.seed for p in points] == [p.seed for p in _grid()]
    assert sorted({p.rtt for p in points}) == pytest.approx([0.025, 0.05])
    with pytest.raises(ConfigError, match="not both"):
        make_grid(SIZES, DROPS, rtts=[0.01], distances=[1e6])


def test_local_processes_match_serial() -> None:
    points = _grid()
    serial = run_sweep(points, executor="serial")
    local = run_sweep(points, executor="local", workers=2, batch_size=5)
    assert local == serial
    assert [r["scheme"] for r in serial] == [p.scheme for p in points]
    assert all(r["mean_s"] >= r["ideal_s"] * (1 - 1e-12) for r in serial)


def test_dask_local_cluster_matches_local_executor() -> None:
    distributed = pytest.importorskip("distributed")
    points = _grid()
    expected = run_sweep(points, executor="local", workers=2, batch_size=4)
    seen = []
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        rows = run_sweep(points, executor="dask", client=client, batch_size=3, progress=seen.append)
    assert rows == expected
    assert sum(seen) == len(points)


def test_csv_round_trip(tmp_path) -> None:
    rows = run_sweep(make_grid(SIZES, DROPS, ["sr-rto", "ec-mds"], samples=100), executor="serial")
    path = write_csv(rows, tmp_path / "out" / "sweep.csv")
    back = read_csv(path)
    assert len(back) == len(rows)
    for a, b in zip(rows, back, strict=True):
        assert b["scheme"] == a["scheme"] and b["size_bytes"] == a["size_bytes"]
        assert b["mean_s"] == pytest.approx(a["mean_s"], rel=1e-15)
        assert b["fallback_probability"] == a["fallback_probability"]
