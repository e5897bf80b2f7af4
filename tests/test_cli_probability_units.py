"""Probabilities name their unit: --drop (per chunk or --drop-unit) and --loss (per packet)
in the simulator commands as in send/demo/emulate; a mean interval that cannot be computed
says so."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

from sdr.simulator.stats import ci_is_open, summarize

SDR = str(Path(sys.executable).with_name("sdr"))
LINK = ["--size", "1MiB", "--rtt", "25ms"]


def _sdr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SDR, *args], capture_output=True, text=True, timeout=120, check=False)


def test_sim_loss_is_per_packet_and_the_title_says_so() -> None:
    by_loss = _sdr("sim", "--scheme", "sr-rto", *LINK, "--loss", "1e-4")
    assert by_loss.returncode == 0, by_loss.stderr
    assert "drop 1e-4 per packet" in by_loss.stdout
    as_json = _sdr("sim", "--scheme", "sr-rto", *LINK, "--loss", "1e-4", "--json")
    same = _sdr("sim", "--scheme", "sr-rto", *LINK, "--drop", "1e-4", "--drop-unit", "packet",
                "--json")  # fmt: skip
    assert json.loads(as_json.stdout) == json.loads(same.stdout)
    assert json.loads(as_json.stdout)["drop_unit"] == "packet"
    by_drop = _sdr("sim", "--scheme", "sr-rto", *LINK, "--drop", "1e-3")
    assert "drop 1e-3 per chunk" in by_drop.stdout


def test_select_title_names_the_unit() -> None:
    proc = _sdr("select", *LINK, "--drop", "1e-3")
    assert proc.returncode == 0, proc.stderr
    assert "drop 1e-3 per chunk" in proc.stdout


def test_drop_and_loss_together_or_neither_is_one_line_error() -> None:
    both = _sdr("sim", "--scheme", "sr-rto", *LINK, "--drop", "1e-3", "--loss", "1e-3")
    assert both.returncode == 2
    assert both.stderr.strip() == (
        "error: give either --drop (per --drop-unit) or --loss (per packet), not both"
    )
    neither = _sdr("select", *LINK)
    assert neither.returncode == 2 and "--loss P (per packet)" in neither.stderr


def test_mean_interval_of_identical_samples_cannot_be_computed() -> None:
    summary = summarize(np.full(20, 0.025))
    assert ci_is_open(summary.mean_ci) and summary.mean_ci == (-math.inf, math.inf)
    assert ci_is_open(summarize(np.array([0.025])).mean_ci)
    spread = summarize(np.array([1.0, 2.0, 3.0]))
    assert not ci_is_open(spread.mean_ci) and spread.mean_ci[0] < 2.0 < spread.mean_ci[1]


def test_sim_table_says_the_mean_interval_cannot_be_computed() -> None:
    args = ["sim", "--scheme", "sr-rto", "--size", "128KiB", "--rtt", "25ms", "--drop", "1e-7"]
    args += ["--burst", "4", "--method", "montecarlo", "--samples", "20"]
    proc = _sdr(*args)
    assert proc.returncode == 0, proc.stderr
    mean_line = next(line for line in proc.stdout.splitlines() if "mean " in line)
    assert "cannot be computed" in mean_line and ".." not in mean_line
    assert "all 20" in proc.stdout and "samples equal" in proc.stdout
    data = json.loads(_sdr(*args, "--json").stdout)
    assert data["mean_ci_s"] == [None, None]
