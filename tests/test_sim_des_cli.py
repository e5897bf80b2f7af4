"""``sdr sim --method des``: the discrete-event simulation behind the CLI."""

from __future__ import annotations

import json

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


def _json(app: typer.Typer, args: str) -> dict:
    result = runner.invoke(app, args.split())
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_sim_des_json(app) -> None:
    base = "sim --scheme ec-mds --ec 8,2 --size 1MiB --rate 10Gbit/s --rtt 25ms"
    out = _json(app, base + " --drop 0.02 --method des --samples 8 --seed 1 --json")
    assert out["method"] == "des" and out["samples"] == 8
    assert out["quantile_method"] == "des"
    assert out["ideal_s"] == pytest.approx(1 / 1.25e3 * 1.048576 + 0.025)
    assert out["mean_s"] >= 0.99 * out["ideal_s"]
    assert out["failed_writes"] == 0 and out["des_events"] > 0
    assert 0.0 <= out["fallback_probability"] <= 1.0
    assert out["p50_ci_s"][0] <= out["p50_s"] <= out["p50_ci_s"][1]


def test_sim_des_bursts_and_table(app) -> None:
    base = "sim --scheme sr-rto --size 256KiB --rate 10Gbit/s --rtt 10ms --drop 0.01"
    out = _json(app, base + " --drop-unit packet --burst 4 --method des --samples 4 --json")
    assert out["loss_model"] == "GilbertElliott" and out["analytic_is_iid_equivalent"]
    result = runner.invoke(app, (base + " --method des --samples 3").split())
    assert result.exit_code == 0 and "slowdown" in result.stdout and "des" in result.stdout
