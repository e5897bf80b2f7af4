"""Sweeps and simulations that cannot start: huge grids, absurd values, early interrupts."""

from __future__ import annotations

import itertools
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sdr.cli.sim_sweep import _interrupted_line
from sdr.errors import ConfigError
from sdr.simulator.bounds import MAX_GRID_POINTS, MAX_SAMPLES
from sdr.simulator.link import DEFAULT_RATE
from sdr.simulator.sweep import SweepInterrupted, make_grid, read_csv, sweep_to_csv

SDR = str(Path(sys.executable).with_name("sdr"))


def _sdr(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SDR, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def _one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_grid_points_are_built_as_they_are_read() -> None:
    sizes, drops = [1 << e for e in range(10, 30)], [10.0**-e for e in range(1, 11)]
    rtts, schemes = [0.001 * i for i in range(1, 51)], ["sr-rto", "sr-nack", "ec-mds", "ec-xor"]
    tracemalloc.start()
    grid = make_grid(sizes, drops, schemes, rtts=rtts, seed=7, samples=10)
    built, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(grid) == 20 * 10 * 50 * 4 == 40_000
    assert built < 1 << 20  # a list of 40,000 points takes tens of MB
    # the same points, seeds and order as the cartesian product
    combos = list(itertools.product([DEFAULT_RATE], rtts, sizes, drops, schemes))
    for index in (0, 1, 3999, 39_999):
        rate, rtt, size, drop, scheme = combos[index]
        point = grid[index]
        seed = int(np.random.SeedSequence([7, index]).generate_state(1)[0])
        assert (point.rate, point.rtt, point.size_bytes) == (rate, rtt, size)
        assert (point.drop, point.scheme, point.seed, point.samples) == (drop, scheme, seed, 10)
    assert grid[-1] == grid[39_999] and grid[2:4] == [grid[2], grid[3]]
    assert next(iter(grid)) == grid[0]
    with pytest.raises(IndexError):
        grid[40_000]


def test_a_grid_past_the_bound_is_refused_before_any_point_is_built() -> None:
    sizes = list(range(1, 1001))
    with pytest.raises(ConfigError, match=f"more than the {MAX_GRID_POINTS:,}"):
        make_grid(sizes, [1e-3] * 101, ["sr-rto"])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(sizes=[1e308]), "write size"),
        (dict(sizes=[0]), "write size"),
        (dict(drops=[1.0]), "drop probability"),
        (dict(drops=[float("nan")]), "drop probability"),
        (dict(distances=[1e6], propagation_speed=0.0), "propagation speed"),
        (dict(rtts=[float("inf")]), "RTT"),
        (dict(rates=[0.0]), "line rate"),
        (dict(samples=10**12), f"[1, {MAX_SAMPLES:,}]"),
        (dict(samples=0), "samples"),
        (dict(schemes=["sr-foo"]), "unknown scheme"),
        (dict(sizes=[]), "empty"),
    ],
)
def test_every_grid_value_is_checked_up_front(kwargs, words) -> None:
    args = dict(sizes=[1 << 20], drops=[1e-3], schemes=["sr-rto"]) | kwargs
    with pytest.raises(ConfigError, match=words.replace("[", r"\[")):
        make_grid(args.pop("sizes"), args.pop("drops"), args.pop("schemes"), **args)


def test_cli_grid_file_of_12m_points_is_one_line_error(tmp_path) -> None:
    values = ", ".join(f'"{i}KiB"' for i in range(1, 101))
    drops = ", ".join(f"{i}e-6" for i in range(1, 101))
    rtts = ", ".join(f'"{i}ms"' for i in range(1, 301))
    (tmp_path / "g.toml").write_text(
        f"sizes = [{values}]\ndrops = [{drops}]\nrtts = [{rtts}]\n"
        "schemes = ['sr-rto', 'ec-mds', 'sr-nack', 'ec-xor']\n"
    )
    proc = _sdr("sweep", "--grid", "g.toml", "--out", "s.csv", cwd=tmp_path)
    _one_line_error(proc, "12,000,000 points", "split it")
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("sizes = [1e308]", "write size"),
        ("speed = 0", "propagation speed"),
        ("samples = 1000000000000", "samples must be in"),
    ],
)
def test_cli_sweep_bad_values_are_one_line_errors(tmp_path, line, words) -> None:
    sizes = "" if line.startswith("sizes") else 'sizes = ["1MiB"]\n'
    (tmp_path / "g.toml").write_text(f"{line}\n{sizes}drops = [1e-3]\nschemes = ['sr-rto']\n")
    proc = _sdr("sweep", "--grid", "g.toml", "--out", "s.csv", cwd=tmp_path)
    _one_line_error(proc, words)
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--size", "1e308B"], "write size"),
        (["--size", "1MiB", "--speed", "0"], "propagation speed"),
        (["--size", "1MiB", "--samples", str(10**12)], "samples must be in"),
        (["--size", "1MiB", "--samples", str(10**12), "--method", "des"], "samples must be in"),
    ],
)
def test_cli_sim_bad_values_are_one_line_errors(tmp_path, args, words) -> None:
    proc = _sdr("sim", "--scheme", "sr-rto", "--drop", "1e-3", *args, cwd=tmp_path)
    _one_line_error(proc, words)


class _InterruptedWhileRead(list):
    """Grid points whose reading is interrupted, as Ctrl-C while a resume matches rows."""

    def __iter__(self):
        raise KeyboardInterrupt


def test_ctrl_c_while_resume_reads_its_rows_leaves_them_and_says_so(tmp_path) -> None:
    points = make_grid([128 << 10, 1 << 20], [1e-4], ["sr-rto"], samples=20)
    path = tmp_path / "s.csv"
    sweep_to_csv(list(points)[:1], path, executor="serial")
    before = path.read_bytes()
    with pytest.raises(SweepInterrupted) as info:
        sweep_to_csv(_InterruptedWhileRead(points), path, resume=True, executor="serial")
    assert info.value.finished is None and path.read_bytes() == before
    assert len(read_csv(path)) == 1
    line = _interrupted_line(info.value, False)
    assert (
        line
        == f"interrupted before any point ran; {path} is as it was; run the same command to go on"
    )


def test_cli_ctrl_c_before_the_sweep_starts_exits_130_with_a_true_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import sdr.simulator.sweep
    from sdr.cli.main import app

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "s.csv"
    out.write_text("kept\n")
    monkeypatch.setattr(sdr.simulator.sweep, "make_grid", interrupted)
    result = CliRunner().invoke(app, ["sweep", "--out", str(out), "--resume"])
    assert result.exit_code == 130, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"interrupted before any point ran; {out} is as it was; run the same command to go on"
    )
    assert out.read_text() == "kept\n"
