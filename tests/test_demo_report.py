"""``sdr demo``'s summary over repeated runs: one row per scheme with the median, the
range and the spread of its runs; a run the emulator delivered late is flagged (in the
table, the chart and the JSON), so a reader can tell a host hiccup from the link."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from sdr.backends.wan import can_use_namespaces
from sdr.cli.demo_report import by_scheme, results_chart, results_table, spread
from sdr.cli.emulator_report import LATE_FRACTION, late_run, lateness, run_drops

SDR = str(Path(sys.executable).with_name("sdr"))
needs_root = pytest.mark.skipif(bool(can_use_namespaces()), reason=str(can_use_namespaces()))


def _summary(late_a: float, late_b: float, drops: int = 3) -> dict:
    def side(late: float, n: int) -> dict:
        return {"max_lateness_s": late, "late_packets": n}

    return {
        "a_to_b": {"loss_drops": drops},
        "b_to_a": {"loss_drops": 1},
        "report": {"a_to_b": side(late_a, 7), "b_to_a": side(late_b, 2)},
    }


def _row(scheme: str, used: str, seconds: float, late: bool = False) -> dict:
    return {
        "requested": scheme,
        "config": {"scheme": used, "k": 32, "m": 8},
        "completion_s": seconds,
        "predicted_s": 0.55,
        "ideal_s": 0.5,
        "wire_bytes": 2**26,
        "stats": {"chunks_retransmitted": 8, "chunks_sent_lane1": 0},
        "late": late,
    }


def test_lateness_takes_the_worst_direction_and_sums_late_packets() -> None:
    assert lateness(_summary(0.004, 0.009)) == (0.009, 9)
    assert lateness({}) == (0.0, 0)
    assert run_drops(_summary(0, 0, drops=5)) == 6


def test_a_run_is_late_when_lateness_could_move_its_time() -> None:
    completion = 1.0
    assert not late_run(_summary(LATE_FRACTION * completion * 0.9, 0.0), completion)
    assert late_run(_summary(0.0, LATE_FRACTION * completion * 1.1), completion)
    assert not late_run({}, completion)  # no report: nothing to blame


def test_runs_group_by_the_scheme_asked_for_in_order() -> None:
    rows = [_row("sr-nack", "sr-nack", t) for t in (0.6, 0.7)] + [_row("auto", "sr-nack", 0.6)]
    groups = by_scheme(rows)
    assert list(groups) == ["sr-nack", "auto"]
    assert [len(g) for g in groups.values()] == [2, 1]
    assert spread([0.7, 0.6, 0.9]) == (0.6, 0.7, 0.9)


def test_table_shows_median_range_spread_and_late_runs_in_80_columns() -> None:
    rows = [
        _row("sr-nack", "sr-nack", 0.60),
        _row("sr-nack", "sr-nack", 0.66, late=True),
        _row("sr-nack", "sr-nack", 0.63),
        _row("ec-mds", "ec-mds", 0.58),
        _row("ec-mds", "ec-mds", 0.58),
        _row("ec-mds", "ec-mds", 0.59),
    ]
    console = Console(width=80, record=True)
    console.print(results_table(rows, "64MiB over 1Gbit/s"))
    text = console.export_text()
    assert "…" not in text  # nothing cut off at the width a pipe gets
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("sr-nack"))
    cells = line.split()
    assert cells[1] == "0.63"  # the median
    assert cells[2] == "0.60-0.66" and cells[3] == "10%"  # (0.66 - 0.60) / 0.63
    assert cells[-1] == "1!"
    assert next(ln for ln in text.splitlines() if "ec-mds 32,8" in ln).split()[-1] == "0"
    assert "3 runs per scheme" in text


def test_chart_is_written(tmp_path: Path) -> None:
    rows = [_row("sr-nack", "sr-nack", t, late=t > 0.65) for t in (0.6, 0.66)]
    path = results_chart(rows, tmp_path / "demo.png", "title")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_root
def test_demo_repeats_each_scheme_on_a_fresh_link(tmp_path: Path) -> None:
    """The real command: two runs of one scheme, each with its own link summary and
    lateness verdict in the JSON, one row in the table."""
    out = tmp_path / "demo"
    result = subprocess.run(
        [SDR, "demo", "--size", "2MiB", "--schemes", "sr-nack", "--repeat", "2"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads((out / "demo.json").read_text())["runs"]
    assert [r["run"] for r in runs] == [0, 1]
    for r in runs:
        assert r["link"]["report"]["a_to_b"]["packets"] > 0
        assert r["late"] == late_run(r["link"], r["completion_s"])
    assert "2 runs per scheme" in result.stdout
    rows = [ln for ln in result.stdout.splitlines() if re.match(r"\s*sr-nack\s+\d+\.\d\d ", ln)]
    assert len(rows) == 1, result.stdout  # one table row for both runs
    assert (out / "demo.png").exists()
