"""One vocabulary of flags and units (the real ``sdr`` in a subprocess): ``write-bw``
keeps perftest's short flags for what they mean there and takes none of perftest's others
for something else; the rate is ``--rate`` and the chunk ``--chunk`` as in ``sdr send``;
iperf3's rate forms (``10G``) and a time with a unit on every ``--timeout``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SDR = str(Path(sys.executable).with_name("sdr"))


def _sdr(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SDR_TRACEBACK"}
    return subprocess.run([SDR, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("flag", ["-c", "-i", "-r", "-R", "-b"])
def test_write_bw_takes_no_perftest_short_flag_for_something_else(flag: str) -> None:
    """perftest's -c (connection type), -i (IB port), -r (rx depth), -R (RDMA CM) and -b
    (bidirectional) have no counterpart here: a perftest user's habit is refused in one
    line, not silently read as another setting."""
    result = _sdr("write-bw", "127.0.0.1", flag, "1")
    assert result.returncode == 2
    assert f"No such option: {flag}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_write_bw_help_names_the_shared_vocabulary() -> None:
    out = _sdr("write-bw", "--help").stdout
    for flag in ("--rate", "--chunk", "-q, --channels", "--interval", "--report-gbits"):
        assert flag in out
    assert "--data-port" in out and "--data-port" in _sdr("recv", "--help").stdout
    for gone in ("--rate-limit", "--chunk-size", "--udp-port"):
        assert gone not in out
    send = _sdr("send", "--help").stdout
    assert "--rate" in send and "--chunk" in send


def test_write_bw_reads_an_iperf3_rate() -> None:
    """``--rate 1G`` passes the option checks: the run then fails only for want of a
    server (connection refused), not on the value."""
    result = _sdr("write-bw", "127.0.0.1", "--port", "1", "--rate", "1G", "--timeout", "1s")
    assert result.returncode == 2
    assert "rate" not in result.stderr.lower(), result.stderr
    bad = _sdr("write-bw", "127.0.0.1", "--rate", "10")
    assert bad.returncode == 2 and "has no unit" in bad.stderr


@pytest.mark.parametrize("command", ["send", "recv"])
def test_send_and_recv_take_a_timeout_with_a_unit(command: str, tmp_path: Path) -> None:
    args = (
        [command, str(tmp_path / "f"), "--to", "127.0.0.1:1"]
        if command == "send"
        else [command, "--out", str(tmp_path / "out"), "--bind", "127.0.0.1", "--port", "1"]
    )
    if command == "send":
        (tmp_path / "f").write_bytes(b"x" * 100)
    for bad in ("0", "-1s", "soon"):
        result = _sdr(*args, "--timeout", bad)
        assert result.returncode == 2
        assert result.stderr.strip().startswith("error: --timeout"), result.stderr
        assert "Invalid value" not in result.stderr
    if command == "send":  # a good one goes on to the network: refused within 0.5 s
        result = _sdr(*args, "--timeout", "500ms")
        assert result.returncode == 2
        assert "within 0.5 s" in result.stderr, result.stderr


def test_a_per_packet_probability_is_loss_everywhere() -> None:
    """``--loss`` is per packet (send, demo, bitmap-demo); ``--drop`` is the simulator's,
    per ``--drop-unit``."""
    for command in ("demo", "bitmap-demo", "send"):
        assert "--loss" in _sdr(command, "--help").stdout
    assert "--drop " not in _sdr("bitmap-demo", "--help").stdout
    old = _sdr("bitmap-demo", "--drop", "0.1")
    assert old.returncode == 2 and "No such option: --drop" in old.stderr
    assert "--drop-unit" in _sdr("sim", "--help").stdout


def test_the_line_rate_is_rate_in_every_command() -> None:
    for command in ("sim", "select", "allreduce-sim", "send", "demo", "write-bw"):
        assert "--rate " in _sdr(command, "--help").stdout, command
        assert "--bandwidth" not in _sdr(command, "--help").stdout, command
    assert "--rates " in _sdr("sweep", "--help").stdout


def test_the_line_rate_defaults_to_one_value_in_every_command() -> None:
    """1 Gbit/s: ``sdr send``'s (its ``link_rate`` default), ``LinkSpec``'s and every
    simulator and emulator command's; the paper's 400 Gbit/s is given where it is meant.
    (Before: ``sim``, ``select``, ``allreduce-sim`` and ``sweep`` said 400 Gbit/s.)"""
    from typer.core import TyperGroup
    from typer.main import get_command

    from sdr.cli.main import app
    from sdr.cli.transfer_options import DEFAULTS
    from sdr.simulator.link import DEFAULT_RATE
    from sdr.simulator.link_spec import LinkSpec
    from sdr.simulator.sweep import make_grid
    from sdr.units import parse_rate

    assert parse_rate(DEFAULTS["link_rate"]) == DEFAULT_RATE == LinkSpec().rate == 1e9
    assert make_grid([1 << 20], [1e-3])[0].rate == DEFAULT_RATE
    group = get_command(app)
    commands = {name: group.commands[name] for name in ("sim", "select", "allreduce-sim")}
    commands |= {"sweep": group.commands["sweep"], "demo": group.commands["demo"]}
    emulate = group.commands["emulate"]
    assert isinstance(emulate, TyperGroup)
    commands |= {f"emulate {n}": c for n, c in emulate.commands.items()}
    for name, command in commands.items():
        (rate,) = [p for p in command.params if {"--rate", "--rates"} & set(p.opts)]
        assert parse_rate(rate.default) == DEFAULT_RATE, name
