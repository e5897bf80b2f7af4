"""`benchmarks.wan_peers` over several loss patterns: medians, spreads, failures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.wan_peers import _median_run, payload_for, report
from sdr.backends.udp.roce import HEADER_SIZE, ICRC_SIZE, IP_UDP_OVERHEAD


def test_the_median_run_carries_min_median_max() -> None:
    runs = [{"seconds": 3.0, "seed": 1}, {"seconds": 1.0, "seed": 2}, {"seconds": 2.0, "seed": 3}]
    median = _median_run(runs)
    assert median["seed"] == 3
    assert median["spread"] == (1.0, 2.0, 3.0)
    assert "spread" not in runs[2]  # the rows themselves stay as measured


def test_a_failed_run_counts_as_the_slowest() -> None:
    median = _median_run([{"seconds": 3.0}, {"seconds": None}, {"seconds": 2.0}])
    assert median["spread"] == (2.0, 3.0, None)
    failed = {"seconds": None, "error": "boom"}
    assert _median_run([failed, {"seconds": None}, {"seconds": 2.0}]) is failed


def test_one_run_has_no_spread() -> None:
    assert _median_run([{"seconds": 5.0}]) == {"seconds": 5.0}
    assert _median_run([{"seconds": None}]) == {"seconds": None}


def test_a_point_whose_runs_mostly_failed_reads_fail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [
        {
            "protocol": "auto",
            "size": 1 << 20,
            "loss": 0.0,
            "seed": seed,
            "ideal_s": 0.1,
            "seconds": t,
        }  # fmt: skip
        for seed, t in ((1, None), (2, None), (3, 0.12))
    ]
    report(rows, argparse.Namespace(rate="1Gbit/s", rtt="25ms", json=None, plot=None), [])
    assert "fail" in capsys.readouterr().out


def test_the_report_shows_each_protocols_spread_and_keeps_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {
            "protocol": proto,
            "size": 1 << 20,
            "loss": 1e-3,
            "seed": seed,
            "ideal_s": 0.1,
            "seconds": t,
        }  # fmt: skip
        for proto, times in (("auto", (0.11, 0.13, 0.12)), ("tcp-bbr", (0.2, 0.24, 0.22)))
        for seed, t in zip((1, 2, 3), times, strict=True)
    ]
    out = tmp_path / "out.json"
    args = argparse.Namespace(rate="1Gbit/s", rtt="25ms", json=str(out), plot=None)
    report(rows, args, [])
    shown = capsys.readouterr().out
    assert "0.110 / 0.120 / 0.130" in shown and "0.200 / 0.220 / 0.240" in shown
    assert "1.83x" in shown  # speedup from the medians: 0.22 / 0.12
    assert len(json.loads(out.read_text())["rows"]) == 6


def test_the_plot_draws_medians_with_the_seeds_range(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from benchmarks.wan_peers import plot

    rows = [
        {
            "protocol": "auto",
            "size": 1 << 20,
            "loss": loss,
            "seed": seed,
            "ideal_s": 0.1,
            "seconds": 0.1 + loss + seed / 100,
        }  # fmt: skip
        for seed in (1, 2, 3)
        for loss in (0.0, 1e-2)
    ]
    path = tmp_path / "wan.png"
    plot(rows, path)
    assert path.stat().st_size > 1000


@pytest.mark.parametrize(
    "link, payload", [(9000, 8192), (1500, 1024), (65000, 32768), (8256, 8192)]
)
def test_sdrs_packet_fills_the_links_mtu_by_default(link: int, payload: int) -> None:
    assert payload_for(link) == payload
    assert payload + IP_UDP_OVERHEAD + HEADER_SIZE + ICRC_SIZE <= link
    with pytest.raises(SystemExit, match="no room"):
        payload_for(200)
