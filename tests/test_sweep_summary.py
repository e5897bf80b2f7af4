"""The sweep's summary figure: the EC/SR crossover size per path and drop rate, drawn
against each swept dimension (``sdr sweep --plot``), the heatmaps behind ``--panels``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sdr.errors import ConfigError
from sdr.simulator.sweep_summary import (
    crossover_size,
    crossovers,
    plot_sweep_summary,
    swept_dimensions,
)

SDR = str(Path(sys.executable).with_name("sdr"))
PNG = b"\x89PNG\r\n\x1a\n"


def _rows(sr: list[float], ec: list[float], rtt: float = 0.025, rate: float = 1e10) -> list:
    sizes = [2**20 * 2**i for i in range(len(sr))]
    rows = []
    for family, times in (("sr-nack", sr), ("ec-mds", ec)):
        for size, t in zip(sizes, times, strict=True):
            rows.append(
                {
                    "scheme": family,
                    "size_bytes": size,
                    "drop": 1e-3,
                    "rate": rate,
                    "rtt": rtt,
                    "p999_s": t,
                    "mean_s": t,
                }
            )
    return rows


def test_crossover_is_where_sr_wins_from_on() -> None:
    mib = 2**20
    assert crossover_size(_rows([2, 3, 4, 5], [1, 2, 5, 6])) == 4 * mib
    assert crossover_size(_rows([1, 2, 3], [2, 3, 4])) == mib  # SR wins at every size
    assert crossover_size(_rows([2, 3, 4], [1, 2, 3])) is None  # EC wins up to the top
    # an EC win in the middle moves the crossover above it: SR must win at every larger size
    assert crossover_size(_rows([1, 2, 9, 4, 5], [2, 3, 4, 5, 6])) == 8 * mib
    assert crossover_size(_rows([1, 2, 3], [1, 2, 3])) == mib  # a tie goes to SR


def test_the_best_of_each_family_decides() -> None:
    rows = _rows([2, 2], [1, 3])
    rows += [dict(r, scheme="sr-rto", p999_s=0.5) for r in rows if r["scheme"] == "sr-nack"]
    assert crossover_size(rows) == 2**20  # sr-rto beats EC everywhere


def test_a_sweep_without_both_families_is_a_clear_error() -> None:
    rows = [r for r in _rows([1, 2], [1, 2]) if r["scheme"] == "sr-nack"]
    with pytest.raises(ConfigError, match="SR and an EC scheme"):
        crossover_size(rows)


def test_crossovers_per_path_and_swept_dimensions(tmp_path: Path) -> None:
    rows = _rows([2, 3, 4], [1, 2, 5], rtt=0.01) + _rows([2, 3, 4], [1, 2, 3], rtt=0.1)
    assert crossovers(rows) == {(1e10, 0.01, 1e-3): 4 * 2**20, (1e10, 0.1, 1e-3): None}
    assert swept_dimensions(rows) == ["rtt"]
    assert swept_dimensions(_rows([1], [1])) == []
    both = rows + _rows([2, 3, 4], [1, 2, 5], rtt=0.01, rate=1e11)
    assert swept_dimensions(both) == ["rtt", "rate"]
    path = plot_sweep_summary(both, tmp_path / "summary.png")
    assert path.read_bytes()[:8] == PNG
    with pytest.raises(ConfigError, match="more than one RTT or rate"):
        plot_sweep_summary(_rows([1], [1]), tmp_path / "one.png")


def test_sdr_sweep_plot_draws_the_summary_and_panels_the_heatmaps(tmp_path: Path) -> None:
    result = subprocess.run(
        [SDR, "sweep", "--sizes", "1MiB,64MiB", "--drops", "1e-3", "--rtts", "5ms,50ms"]
        + ["--samples", "50", "--out", str(tmp_path / "s.csv")]
        + ["--plot", str(tmp_path / "summary.png"), "--panels", str(tmp_path / "heat.png")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "crossover size per swept path" in result.stderr
    assert "speedup heatmaps" in result.stderr
    assert (tmp_path / "summary.png").read_bytes()[:8] == PNG
    assert (tmp_path / "heat.png").read_bytes()[:8] == PNG
