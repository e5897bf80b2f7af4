"""benchmarks/congestion_emulated.py: its options, its numbers and its JSON (no root), and
one small compete run through the emulator (root, iperf3; skipped without)."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from benchmarks import congestion_emulated as ce
from sdr.backends.wan import can_use_namespaces
from sdr.reliability.config import loads


# --- options --------------------------------------------------------------------------
def test_the_defaults_are_the_issue_s_scenarios() -> None:
    opts = ce.parse_args([])
    assert opts.scenarios == ["compete", "loss", "pair"]
    assert (opts.rate, opts.rtt, opts.buffers) == (1e9, 0.025, [1.0])
    assert opts.tcp == ["cubic", "bbr"]
    assert [c.label for c in opts.controllers] == ["delay", "fixed", "bbr"]
    assert [c.name for c in opts.loss_controllers] == ["fixed", "delay"]
    assert opts.losses == [1e-3, 1e-2]
    assert opts.bdp == pytest.approx(3.125e6)


def test_quick_changes_only_what_the_command_line_left_at_its_default() -> None:
    opts = ce.parse_args(["--quick"])
    assert opts.scenarios == ["compete"] and opts.tcp == ["cubic"]
    assert [c.label for c in opts.controllers] == ["delay"] and opts.size == 64 << 20
    opts = ce.parse_args(["--quick", "--controllers", "fixed", "--size", "16MiB"])
    assert [c.label for c in opts.controllers] == ["fixed"] and opts.size == 16 << 20


def test_a_controller_takes_congestion_params_with_units() -> None:
    spec = ce.parse_controller("delay:target=5ms+ai=0.02", 1e9)
    assert (spec.label, spec.name) == ("delay:target=5ms+ai=0.02", "delay")
    assert spec.params == {"target": 0.005, "ai": 0.02}
    config = loads(spec.toml())  # what sdr send reads with --config
    assert config.congestion_params == {"target": 0.005, "ai": 0.02}
    assert ce.parse_controller("bbr", 1e9).toml() == ""
    with_timeout = loads(spec.toml(global_timeout=120.0))
    assert with_timeout.global_timeout == 120.0 and with_timeout.congestion_params == spec.params
    assert loads(ce.parse_controller("fixed", 1e9).toml(30.0)).global_timeout == 30.0
    assert ce.parse_controller("delay:max_rate=2Gbit/s", 1e9).params == {"max_rate": 2e9}


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--scenarios", "compete,race"], "--scenarios takes a comma-separated list"),
        (["--tcp", "vegas"], "--tcp takes a comma-separated list"),
        (["--losses", "often"], "--losses takes comma-separated numbers"),
        (["--losses", "0.5"], "--losses values must be in [0, 0.2]"),
        (["--buffers", "0"], "--buffers values must be in [0.05, 10]"),
        (["--controllers", "vegas"], "'vegas' is not a known congestion controller"),
        (["--controllers", "delay:gain=2"], "unexpected keyword argument 'gain'"),
        (["--controllers", "delay:target"], "must be key=value"),
        (["--controllers", "fixed:target=1ms"], "fixed takes no parameters"),
        (["--controllers", "delay:target=soon"], "target"),
        (["--controllers", ","], "--controllers needs at least one controller"),
        (["--rate", "10"], "rate"),
        (["--rtt", "5s"], "--rtt in [0.1ms, 1s]"),
        (["--lead", "0.1"], "--lead must be in [0.5, 600] s"),
        (["--repeats", "0"], "--repeats must be in [1, 50]"),
        (["--global-timeout", "0.5"], "--global-timeout must be in [1, 600] s"),
        (["--mtu", "9000"], "--mtu must be in [256, tun-mtu - 100]"),
        (["--scheme", "tcp"], "--scheme must be one of"),
        (["--forwarder", "fast"], "--forwarder must be auto, native or python"),
        (["--size", "lots"], "size"),
    ],
)
def test_a_bad_value_is_one_line_naming_it(argv, words) -> None:
    with pytest.raises(ce.UsageError) as info:
        ce.parse_args(argv)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_error_lines_lose_the_temporary_folder(tmp_path) -> None:
    ws = ce.Workspace(tmp_path)
    assert ws.clean(f"error: sending {tmp_path}/payload.bin failed") == (
        "error: sending <tmp>/payload.bin failed"
    )
    assert ws.clean(None) is None
    args = ws.send_args(ce.parse_args([]), ce.parse_controller("delay:target=10ms", 1e9), 0.0)
    config = args[args.index("--config") + 1]
    assert loads(pathlib.Path(config).read_text()).congestion_params == {"target": 0.01}
    assert args[args.index("--congestion") + 1] == "delay"


def test_main_exits_with_the_one_line_error() -> None:
    with pytest.raises(SystemExit) as info:
        ce.main(["--losses", "often"])
    assert str(info.value).startswith("congestion_emulated: error: --losses")
    assert "\n" not in str(info.value)


# --- the numbers ----------------------------------------------------------------------
def test_cumulative_points_give_rates_over_any_span() -> None:
    points = [(1.0, 0.0), (2.0, 125e6), (3.0, 125e6)]  # 1 Gbit/s for a second, then idle
    assert ce.cumulative_at(points, 0.5) == 0 and ce.cumulative_at(points, 9) == 125e6
    assert ce.cumulative_at(points, 1.5) == pytest.approx(62.5e6)
    assert ce.rate_between(points, 1.0, 2.0) == pytest.approx(1e9)
    assert ce.rate_between(points, 1.5, 2.5) == pytest.approx(0.5e9)
    assert ce.rate_between(points, 2.0, 2.0) == 0 and ce.rate_between([], 0, 1) == 0
    assert ce.binned_rate(points, 3.0, width=1.0) == pytest.approx([0.0, 1.0, 0.0])


def test_share_fairness_and_the_targets() -> None:
    assert ce.share_vs_fair(0.5e9, 0.5e9) == 1.0
    assert ce.share_vs_fair(0.2e9, 0.6e9) == pytest.approx(0.5)
    assert ce.share_vs_fair(0, 0) is None
    assert ce.share_met(0.5) and ce.share_met(1.9) and not ce.share_met(0.49)
    assert not ce.share_met(2.0) and not ce.share_met(None)  # the other flow starved
    assert ce.jain([1, 1]) == 1.0 and ce.jain([1, 0]) == pytest.approx(0.5)
    assert ce.jain([3, 1]) == pytest.approx(16 / 20)


def test_windows_percentiles_and_bins() -> None:
    assert ce.window(2.0, 10.0, 1.0) == (3.0, 10.0)
    assert ce.window(2.0, 3.2, 1.0) == (2.0, 3.2)  # too short once settled: all of it
    assert ce.percentiles([]) == {}
    assert ce.percentiles([1, 2, 3, 4, 5]) == {"p50": 3.0, "p95": pytest.approx(4.8)}
    samples = [(0.1, 1.0), (0.2, 3.0), (0.6, 5.0)]
    assert ce.binned_median(samples, 1.0, width=0.5) == [2.0, 5.0]
    assert ce.between(samples, 0.15, 0.6) == [3.0]


def test_iperf3_interval_lines_are_read_and_summaries_skipped() -> None:
    line = "[  5]   0.40-0.50   sec  11.9 MBytes   998 Mbits/sec    3   3.02 MBytes       "
    assert ce.parse_iperf_interval(line) == (0.4, 0.5, 998.0, 3)
    receiver = "[  5]   0.00-0.50   sec  11.9 MBytes   998 Mbits/sec                  "
    assert ce.parse_iperf_interval(receiver) == (0.0, 0.5, 998.0, None)
    summary = "[  5]   0.00-10.00  sec  1.10 GBytes   943 Mbits/sec  12             sender"
    assert ce.parse_iperf_interval(summary) is None
    assert ce.parse_iperf_interval("[ ID] Interval           Transfer     Bitrate") is None
    points = ce.iperf_points([(0.0, 0.5, 800.0, 0), (0.5, 1.0, 400.0, 1)], offset=2.0)
    assert points == [(2.0, 0.0), (2.5, 50e6), (3.0, 75e6)]


# --- a fake run: the rows and the JSON ------------------------------------------------
def _compete_row() -> dict:
    tcp = [(0.0, 0.0), (10.0, 10 * 0.6e9 / 8)]  # 0.6 Gbit/s throughout
    sdr = [(3.0, 0.0), (9.0, 6 * 0.4e9 / 8)]  # 0.4 Gbit/s from 3 s to 9 s
    queue = [(t / 10, 20.0 if t < 30 else 5.0) for t in range(100)]
    row = ce.summarize_compete(
        tcp_points=tcp, sdr_points=sdr, sdr_span=(3.0, 9.0), tcp_start=0.0, queue=queue,
        t_end=10.0, settle=1.0,
    )  # fmt: skip
    row.update(scenario="compete", label="fake", tcp="cubic", controller="delay")
    row.update(buffer_bdp=1.0, sdr_ok=True, sdr_error=None, queue_drops=0)
    return row


def test_compete_numbers_from_traces() -> None:
    row = _compete_row()
    assert row["window_s"] == [4.0, 9.0] and row["tcp_alone_window_s"] == [1.0, 3.0]
    assert row["sdr_gbps"] == pytest.approx(0.4) and row["tcp_gbps"] == pytest.approx(0.6)
    assert row["share_vs_fair"] == pytest.approx(0.8) and row["share_met"]
    assert row["queue_ms"]["tcp_alone"]["p50"] == 20.0 and row["queue_ms"]["both"]["p95"] == 5
    assert len(row["series"]["sdr_gbps"]) == len(row["series"]["tcp_gbps"]) == 40


def test_delay_is_compared_to_fixed_at_each_loss() -> None:
    rows = [
        ce.summarize_loss(1e-3, "fixed", [2.0, 2.2, 2.1], []),
        ce.summarize_loss(1e-3, "delay", [2.1, 2.2, 2.3], []),
        ce.summarize_loss(1e-2, "fixed", [2.0], []),
        ce.summarize_loss(1e-2, "delay", [None], ["stalled"]),
    ]
    ce.compare_to_fixed(rows)
    assert rows[1]["vs_fixed"] == pytest.approx(2.2 / 2.1) and rows[1]["met"]
    assert rows[3]["median_s"] is None and rows[3]["failures"] == 1 and not rows[3]["met"]
    assert "met" not in rows[0]  # the reference itself


def test_the_json_document_and_the_figure(tmp_path, capsys) -> None:
    pair = ce.summarize_pair(
        [[(0.0, 0.0), (4.0, 2e8)], [(1.0, 0.0), (4.0, 0.75e8)]], [(0.0, 4.0), (1.0, 4.0)], 4.0, 1.0
    )
    pair.update(scenario="pair", label="pair delay", controller="delay", met=False)
    pair.update(errors=[None, "stalled"], completion_s=[4.0, 3.0])
    assert pair["window_s"] == [2.0, 4.0] and pair["jain"] == pytest.approx(0.9)
    loss = [
        ce.summarize_loss(1e-3, "fixed", [2.0], []),
        ce.summarize_loss(1e-3, "delay", [2.0], []),
    ]
    ce.compare_to_fixed(loss)
    results = {"compete": [_compete_row()], "loss": loss, "pair": [pair], "links": []}
    opts = ce.parse_args(["--json", str(tmp_path / "out.json")])
    doc = ce.document(results, ce.meta(opts, (1.0, 2.0, 3.0)))
    ce.write_json(doc, opts.json)
    back = json.loads((tmp_path / "out.json").read_text())
    assert set(back) == {"meta", "compete", "loss", "pair", "links"}
    assert back["meta"]["load_average_before"] == [1.0, 2.0, 3.0]
    assert back["meta"]["command"].startswith("python -m benchmarks.congestion_emulated --json")
    assert back["compete"][0]["share_vs_fair"] == pytest.approx(0.8)
    ce.print_results(back, opts)
    printed = capsys.readouterr().out
    assert "share/fair" in printed and "failed pair delay flow 2: stalled" in printed
    pytest.importorskip("matplotlib")
    ce.plot(back, str(tmp_path / "fig.png"))
    assert (tmp_path / "fig.png").stat().st_size > 0


# --- through the emulator -------------------------------------------------------------
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(bool(can_use_namespaces()), reason=str(can_use_namespaces()))
@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed")
def test_one_small_compete_run_through_the_emulator(tmp_path) -> None:
    out = tmp_path / "run.json"
    argv = ["--quick", "--controllers", "fixed", "--size", "16MiB", "--lead", "1"]
    ce.main([*argv, "--json", str(out)])
    [row] = json.loads(out.read_text())["compete"]
    assert "error" not in row, row
    assert row["sdr_ok"], row["sdr_error"]
    assert row["tcp_error"] is None and row["tcp_alone_gbps"] > 0
    assert row["probes_received"] > 0 and row["share_vs_fair"] is not None
