"""`sdr sweep`: a grid from a TOML file, CSV/JSONL/Parquet output, SIGTERM, the heatmaps."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_signals import BIG_GRID, BIG_GRID_POINTS, signal_part_way, start_sweep

from sdr.simulator.plots import format_probability, speedup_figure
from sdr.simulator.sweep import make_grid, read_csv, read_rows, run_sweep

SDR = str(Path(sys.executable).with_name("sdr"))


def _sweep(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SDR, "sweep", *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


GRID = """\
sizes = ["128KiB", "1MiB"]
drops = [1e-4, 1e-2]
schemes = ["sr-rto", "ec-mds"]
rtts = ["10ms", "100ms"]
samples = 20
executor = "serial"
"""


def test_grid_file_sets_the_grid_and_a_flag_given_overrides_it(tmp_path) -> None:
    (tmp_path / "grid.toml").write_text(GRID)
    proc = _sweep("--grid", "grid.toml", "--drops", "1e-3", "--out", "s.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(tmp_path / "s.csv")
    assert len(rows) == 2 * 1 * 2 * 2  # sizes x the flag's one drop x schemes x RTTs
    assert {r["drop"] for r in rows} == {1e-3}
    assert {r["size_bytes"] for r in rows} == {128 << 10, 1 << 20}
    assert {r["rtt"] for r in rows} == {0.01, 0.1}
    assert {r["samples"] for r in rows} == {20}


def test_grid_file_unknown_key_is_one_line_naming_it_and_the_known_ones(tmp_path) -> None:
    (tmp_path / "grid.toml").write_text('sizez = ["1MiB"]\n')
    proc = _sweep("--grid", "grid.toml", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "unknown key 'sizez'" in lines[0]
    assert "known keys:" in lines[0] and "sizes" in lines[0] and "drop_unit" in lines[0]
    assert not (tmp_path / "sweep.csv").exists()


def test_grid_file_bad_value_names_the_key(tmp_path) -> None:
    (tmp_path / "grid.toml").write_text('drop_unit = "byte"\n')
    proc = _sweep("--grid", "grid.toml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "drop_unit = 'byte'" in proc.stderr and "'chunk', 'packet'" in proc.stderr


def test_jsonl_by_suffix_and_csv_by_format(tmp_path) -> None:
    args = ["--sizes", "128KiB", "--drops", "1e-3", "--schemes", "sr-rto,ec-xor"]
    args += ["--samples", "20", "--executor", "serial"]
    proc = _sweep(*args, "--out", "s.jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["scheme"] for r in rows] == ["sr-rto", "ec-xor"]
    assert rows == read_rows(tmp_path / "s.jsonl")
    assert "(jsonl)" in proc.stderr
    proc = _sweep(*args, "--out", "s.txt", "--format", "csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s.txt").read_text().startswith("scheme,size_bytes,")
    proc = _sweep(*args, "--out", "s.txt", "--format", "xml", "--force", cwd=tmp_path)
    assert proc.returncode == 2 and "csv, jsonl, parquet" in proc.stderr


def test_jsonl_resume_keeps_rows(tmp_path) -> None:
    args = ["--sizes", "128KiB", "--drops", "1e-3", "--schemes", "sr-rto,ec-mds", "--samples"]
    args += ["20", "--executor", "serial", "--out", "s.jsonl"]
    assert _sweep(*args, cwd=tmp_path).returncode == 0
    first = (tmp_path / "s.jsonl").read_text()
    (tmp_path / "s.jsonl").write_text(first.splitlines(keepends=True)[0])
    proc = _sweep(*args, "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s.jsonl").read_text() == first


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow installed")
def test_parquet_without_pyarrow_is_a_clear_error(tmp_path) -> None:
    proc = _sweep("--out", "s.parquet", cwd=tmp_path)
    assert proc.returncode == 2
    assert "pyarrow" in proc.stderr and "--format csv|jsonl" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.parquet").exists()


def test_parquet_with_pyarrow(tmp_path) -> None:
    pytest.importorskip("pyarrow")
    args = ["--sizes", "128KiB", "--drops", "1e-3", "--schemes", "sr-rto,ec-mds", "--samples"]
    proc = _sweep(*args, "20", "--executor", "serial", "--out", "s.parquet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r["scheme"] for r in read_rows(tmp_path / "s.parquet")] == ["sr-rto", "ec-mds"]
    assert not list(tmp_path.glob("*.partial.csv"))


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM")
def test_sigterm_ends_like_ctrl_c_with_143_and_resumes(tmp_path) -> None:
    path = tmp_path / "s.csv"
    proc = start_sweep(SDR, "sweep", *BIG_GRID, "--out", str(path))
    signal_part_way(proc, path, signal.SIGTERM, total=BIG_GRID_POINTS)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    kept = len(read_csv(path))
    assert kept >= 2
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"terminated (SIGTERM): {kept} of {BIG_GRID_POINTS} points finished"), (
        err
    )
    assert "--resume" in last and "Traceback" not in err


def _rows_two_rtts() -> list[dict]:
    points = make_grid(
        [128 << 10, 8 << 20],
        [1e-4, 1e-2],
        ["sr-rto", "sr-nack", "ec-mds", "ec-xor"],
        rtts=[0.01, 0.1],
        method="analytic",
    )
    return run_sweep(points, executor="serial")


def test_heatmaps_one_panel_row_per_rtt_labelled_with_ec_xor_and_link_in_title() -> None:
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    fig = speedup_figure(_rows_two_rtts())
    try:
        axes = [ax for ax in fig.axes if ax.get_images()]
        assert len(axes) == 2 * 2 * 4  # RTTs x (mean, p99.9) x (2 EC x 2 SR)
        titles = [ax.get_title() for ax in axes]
        assert sum("RTT 10ms" in t for t in titles) == 8
        assert sum("RTT 100ms" in t for t in titles) == 8
        assert sum("ec-xor" in t for t in titles) == 8
        caption = fig._suptitle.get_text()
        assert "MTU 4KiB" in caption and "chunk 64KiB" in caption and "drop per chunk" in caption
        for ax in axes:
            assert "per chunk" in ax.get_xlabel()
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            assert ticks == ["1e-4", "1e-2"]
            image = ax.get_images()[0]
            for text in ax.texts:  # contrast: white on dark cells, black on light ones
                x, y = text.get_position()
                rgb = image.cmap(image.norm(image.get_array()[int(y), int(x)]))[:3]
                light = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2] > 0.45
                assert to_rgb(text.get_color()) == ((0, 0, 0) if light else (1, 1, 1))
        bar = [ax for ax in fig.axes if not ax.get_images()][0]
        labels = [t.get_text() for t in bar.get_yticklabels()]
        assert labels and all("10^" not in t and "times" not in t for t in labels)
    finally:
        plt.close(fig)


def test_format_probability() -> None:
    assert [format_probability(p) for p in (1e-7, 2.5e-3, 0.1, 0.5)] == [
        "1e-7",
        "2.5e-3",
        "0.1",
        "0.5",
    ]
