"""The simulator's CLI contract: sdr sim / select / sweep / allreduce-sim."""

from __future__ import annotations

import csv
import json
import tomllib

import pytest
import typer
from typer.testing import CliRunner

from sdr.cli import cmd_sim

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    cmd_sim.register(app)
    return app


SIM_KEYS = {
    "mean_s",
    "p50_s",
    "p99_s",
    "p999_s",
    "ideal_s",
    "slowdown_mean",
    "slowdown_p999",
    "fallback_probability",
    "quantile_method",
}


def _a(text: str) -> list[str]:
    return text.split()


def _json(app, args: list[str]) -> dict:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_sim_analytic_json(app) -> None:
    out = _json(
        app,
        _a("sim --scheme sr-rto --size 8MiB --rate 400Gbit/s --rtt 25ms --drop 1e-3 --json"),
    )
    assert out.keys() >= SIM_KEYS
    assert out["quantile_method"] == "analytic-cdf"
    assert out["fallback_probability"] is None
    assert out["ideal_s"] == pytest.approx(128 * 65536 * 8 / 400e9 + 0.025)
    assert out["params"]["rto_rtts"] == 3.0
    # a drop in the last RTO costs at least one RTO: p99.9 >= ideal + 3 RTT
    assert out["p999_s"] >= out["ideal_s"] + 0.075
    assert out["slowdown_p999"] == pytest.approx(out["p999_s"] / out["ideal_s"])


def test_sim_montecarlo_ec_distance_packet_unit(app) -> None:
    args = (
        "sim --scheme ec-xor --size 64MiB --rate 100Gbit/s --distance 3750km --drop 1e-4 "
        "--drop-unit packet --ec 16,4 --method montecarlo --samples 2000 --seed 1 --json"
    )
    out = _json(app, _a(args))
    assert out.keys() >= SIM_KEYS
    assert out["quantile_method"] == "montecarlo"
    assert out["rtt"] == pytest.approx(0.025)
    assert out["chunk_drop_probability"] == pytest.approx(1 - (1 - 1e-4) ** 16)
    assert out["params"]["k"] == 16 and out["params"]["m"] == 4
    assert 0.0 < out["fallback_probability"] < 1.0
    # 2000 samples bound a p99.9 only from below: the upper bound is open (null)
    assert out["p999_ci_s"][0] <= out["p999_s"] and out["p999_ci_s"][1] is None
    assert out["p99_ci_s"][0] <= out["p99_s"] <= out["p99_ci_s"][1]


def test_sim_nack_default_rto_and_table(app) -> None:
    out = _json(app, _a("sim --scheme sr-nack --size 1MiB --rtt 10ms --drop 0.01 --json"))
    assert out["params"]["rto_rtts"] == 3.0  # the SDK RTO: passed back, no spurious repairs
    assert out["params"]["retry_rtts"] == 1.0  # what a loss costs: the NACK's round trip
    result = runner.invoke(app, _a("sim --scheme sr-nack --size 1MiB --rtt 10ms --drop 0.01"))
    assert result.exit_code == 0 and "slowdown" in result.stdout


def test_sim_errors(app) -> None:
    result = runner.invoke(
        app, _a("sim --scheme sr-rto --size 1MiB --drop 0.01 --rtt 1ms --distance 1km")
    )
    assert result.exit_code == 2 and "either --rtt or --distance" in result.output
    result = runner.invoke(app, _a("sim --scheme sr-rto --size 1Mo --drop 0.01"))
    assert result.exit_code == 2 and "1Mo" in result.output


def test_select_json_and_toml(app) -> None:
    base = "select --size 8MiB --rate 400Gbit/s --rtt 25ms --drop 1e-3 --objective p999"
    out = _json(app, _a(base + " --json"))
    assert out.keys() == {"scheme", "params", "mean_s", "p999_s"}
    assert out["scheme"].startswith("ec-")
    result = runner.invoke(app, _a(base + " --toml"))
    assert result.exit_code == 0
    assert tomllib.loads(result.stdout)["reliability"]["scheme"] == out["scheme"]


def test_sweep_writes_csv_and_plot(app, tmp_path) -> None:
    csv_path, png = tmp_path / "s.csv", tmp_path / "s.png"
    args = [
        "sweep",
        "--sizes", "128KiB,8MiB",
        "--drops", "1e-4,1e-2",
        "--samples", "200",
        "--executor", "serial",
        "--out", str(csv_path),
        "--plot", str(png),
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 2 * 2 * 4
    assert {r["scheme"] for r in rows} == {"sr-rto", "sr-nack", "ec-mds", "ec-xor"}
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_allreduce_sim_json(app) -> None:
    args = "allreduce-sim --dcs 3 --size 48MiB --rtt 25ms --drop 1e-3 --samples 500 --json"
    out = _json(app, _a(args))
    assert out["dcs"] == 3
    by_scheme = {r["scheme"]: r for r in out["results"]}
    assert by_scheme.keys() == {"sr-rto", "sr-nack", "ec-mds", "ec-xor"}
    assert by_scheme["sr-rto"]["stages"] == 4
    assert by_scheme["ec-mds"]["p999_s"] < by_scheme["sr-rto"]["p999_s"]


def test_sim_bursty_and_traced_losses(app, tmp_path) -> None:
    base = "sim --scheme ec-mds --size 1MiB --rtt 25ms --chunk 4096 --ec 8,2 --json --samples 400"
    out = _json(app, _a(base + " --drop 0.01 --drop-unit packet --burst 8 --method montecarlo"))
    assert out["loss_model"] == "GilbertElliott" and out["analytic_is_iid_equivalent"]
    assert out["quantile_method"] == "montecarlo"
    # a burst of ~8 packets (8 chunks here) defeats an (8, 2) submessage; with i.i.d. losses
    # at the same rate the fallback probability would be ~0.4%
    assert out["fallback_probability"] > 0.15
    assert out["mean_s"] > out["analytic_mean_s"]
    trace = tmp_path / "loss.txt"
    trace.write_text("0 " * 999 + "1\n")  # one packet in a thousand, evenly spaced
    out = _json(app, _a(base + f" --drop 0 --trace {trace} --method montecarlo"))
    assert out["chunk_drop_probability"] == pytest.approx(1e-3)
    assert out["fallback_probability"] == 0.0  # isolated losses are always recoverable
    result = runner.invoke(app, _a("sim --scheme sr-rto --size 1MiB --drop 1e-3 --burst 4"))
    assert result.exit_code == 2 and "--method montecarlo" in result.output


def test_sim_des_reports_progress_on_stderr_only() -> None:
    """``--method des`` is slow: it says so on stderr (one line off a terminal), stdout is JSON."""
    import subprocess
    import sys
    from pathlib import Path

    sdr = str(Path(sys.executable).with_name("sdr"))
    args = "sim --scheme sr-nack --size 256KiB --rate 10Gbit/s --rtt 5ms --drop 1e-2"
    result = subprocess.run(
        [sdr, *_a(args), "--method", "des", "--samples", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["quantile_method"] == "des"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "simulating 3 writes of 256KiB" in lines[0], result.stderr
