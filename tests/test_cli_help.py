"""``sdr`` help is plain and complete: ``-h``, ``--version``, no eaten ``[reliability]``,
no ``<bool>`` metavar on flags, no RST double backquotes (real command, subprocess)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer

import sdr
from sdr.crc import CRC32_IMPLEMENTATION

SDR = str(Path(sys.executable).with_name("sdr"))


def _sdr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SDR, *args], capture_output=True, text=True, timeout=120)


def _commands() -> list[list[str]]:
    from sdr.cli.main import app

    found: list[list[str]] = []

    def walk(command: click.Command, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def test_version_names_sdr_python_and_crc() -> None:
    result = _sdr("--version")
    assert result.returncode == 0, result.stderr
    out = result.stdout.strip()
    assert sdr.__version__ in out
    assert platform.python_version() in out
    assert CRC32_IMPLEMENTATION in out
    from sdr import placement

    assert f"placement: {placement.DATAPATH}" in out


def test_dash_h_is_help() -> None:
    short, long = _sdr("-h"), _sdr("--help")
    assert short.returncode == 0 == long.returncode
    assert short.stdout == long.stdout
    assert "-h, --help" in short.stdout
    sub = _sdr("write-bw", "-h")
    assert sub.returncode == 0 and "--interval" in sub.stdout


def test_select_help_keeps_the_table_name() -> None:
    out = " ".join(_sdr("select", "--help").stdout.split())
    assert "Print a [reliability] config snippet" in out


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "sdr")
def test_help_has_no_bool_metavar_nor_rst(path: list[str]) -> None:
    result = _sdr(*path, "--help")
    assert result.returncode == 0, result.stderr
    assert "<bool>" not in result.stdout
    assert "``" not in result.stdout
    for python_type in ("<str>", "<int>", "<float>", "<path>"):  # say what a value is
        assert python_type not in result.stdout, python_type


@pytest.mark.parametrize(
    "command", [["send"], ["write-bw"], ["sim"], ["select"], ["sweep"], ["bitmap-demo"]]
)
def test_one_default_mtu_across_commands(command: list[str]) -> None:
    """Every command that takes --mtu defaults to the same 4096 (QPAttr's, the RoCE MTU)."""
    exe = str(Path(sys.executable).with_name("sdr"))
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    result = subprocess.run([exe, *command, "--help"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "--mtu" in line)
    assert re.search(r"\[default: 4096\]", line), line


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("sim", "--drop-unit {chunk|packet}"),
        ("sim", "--method {analytic|montecarlo|des}"),
        ("sweep", "--executor {local|serial|dask}"),
        ("select", "--objective {mean|p999}"),
    ],
)
def test_help_lists_the_choices_of_an_option(command: str, shown: str) -> None:
    """Before, these showed VALUE (or PROB for --drop-unit) and no choices (issue 32,
    item 7)."""
    result = _sdr(command, "-h")
    assert result.returncode == 0, result.stderr
    assert shown in " ".join(result.stdout.split()), result.stdout


def test_sweep_size_defaults_print_in_units() -> None:
    """Before, ``--sizes`` showed 131072,262144,... (issue 32, item 7)."""
    out = " ".join(_sdr("sweep", "-h").stdout.split()).replace(" ", "")
    assert "[default:128KiB,256KiB," in out and "8GiB]" in out


def test_select_says_the_rtt_a_distance_made() -> None:
    """Before, 3000km silently became a 20 ms RTT at the paper's 3e8 m/s (issue 32, item 7)."""
    args = ("--size", "1MiB", "--rate", "10Gbit/s", "--drop", "1e-3")
    out = " ".join(_sdr("select", *args, "--distance", "3000km").stdout.split())
    assert "RTT 20ms (3000km at 3e+08 m/s)" in out, out
    assert "--speed" in " ".join(_sdr("select", "-h").stdout.split())


def test_select_shows_the_best_of_every_scheme_and_the_deciding_rule() -> None:
    """Before, ten tying EC rows could hide every SR row (issue 32, item 8)."""
    args = ("--size", "1MiB", "--distance", "3000km", "--rate", "100Gbit/s")
    out = _sdr("select", *args, "--drop", "1e-5").stdout
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert {"sr-rto", "sr-nack", "ec-mds", "ec-xor"} <= set(rows), out
    assert "decided by the mean completion time" in " ".join(out.split())
