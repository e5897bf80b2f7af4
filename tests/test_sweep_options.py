"""`sdr sweep`'s options are declared once (``sdr.cli.sweep_options.SWEEP_OPTIONS``): the
command line, the grid file and the runner all read that table, and the line rate keeps
one name from ``--rates`` to the rows."""

from __future__ import annotations

import inspect

from typer.core import TyperGroup
from typer.main import get_command

from sdr.cli.main import app
from sdr.cli.sim_options import MethodName
from sdr.cli.sweep_options import SWEEP_OPTIONS, grid_arguments
from sdr.simulator.sweep import make_grid


def _sweep_command():
    group = get_command(app)
    assert isinstance(group, TyperGroup)
    return group.commands["sweep"]


def test_the_command_line_is_the_table() -> None:
    params = [p for p in _sweep_command().params if p.name != "help"]
    assert [p.name for p in params] == [o.name for o in SWEEP_OPTIONS]
    for param, option in zip(params, SWEEP_OPTIONS, strict=True):
        assert f"--{option.key.replace('_', '-')}" in param.opts
        assert param.default == option.option.default


def test_the_grid_file_keys_are_the_tables_file_options() -> None:
    keys = {o.key for o in SWEEP_OPTIONS if o.in_file}
    assert {"sizes", "rates", "rtts", "distances", "speed", "drop_unit", "format"} <= keys
    assert not keys & {"grid", "resume", "force"}  # per invocation only


def test_the_runner_reads_the_grid_from_the_table() -> None:
    defaults = {o.name: o.option.default for o in SWEEP_OPTIONS}
    args = grid_arguments(defaults)
    grid_params = set(inspect.signature(make_grid).parameters) - {"fixed"}
    point_fields = {"drop_unit", "chunk_size", "mtu", "alpha", "k", "m", "method", "samples"}
    assert set(args) == grid_params | point_fields
    assert args["rates"] == [1e9] and args["samples"] == 1000 and (args["k"], args["m"]) == (32, 8)
    assert grid_arguments(defaults | {"method": MethodName.des})["samples"] == 100
    point = make_grid(**grid_arguments(defaults | {"rates": "10G,400G", "rtts": "10ms"}))[-1]
    assert (point.rate, point.rtt, point.distance) == (400e9, 0.01, None)
