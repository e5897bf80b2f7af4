"""Every ``sdr`` command reports a user error as one line ``error: ...`` on stderr, exit 2.

Each case runs the real ``sdr`` command in a subprocess; on the old code each printed a
traceback (exit 1), or, for ``coll-run``, one traceback per rank.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SDR = str(Path(sys.executable).with_name("sdr"))
ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def _sdr(*args: str, as_nobody: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [SDR, *args]
    if as_nobody and os.geteuid() == 0:
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
    env = {k: v for k, v in os.environ.items() if k != "SDR_TRACEBACK"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    err = result.stderr.strip()
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], err


@pytest.fixture()
def busy_port() -> Iterator[int]:
    """A TCP port with a listener on every interface."""
    with socket.create_server(("0.0.0.0", 0)) as sock:
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("coll-plan", "nope"), ("unknown algorithm 'nope'",)),
        (("coll-select", "allreduce", "10QB"), ("'10QB'",)),
        (("coll-run", "--algorithm", "nope", "--world", "2"), ("--algorithm 'nope'",)),
        (("bitmap-demo", "--loss", "1.5"), ("--loss 1.5",)),
        (("emulate", "relay", "--a", "127.0.0.1:1", "--b", "x:abc"), ("'x:abc'",)),
        (("send", "pyproject.toml", "--to", "127.0.0.1:abc"), ("abc",)),
        (("write-bw", "127.0.0.1", "--interval", "0"), ("--interval",)),
        (("write-bw", "127.0.0.1", "--scheme", "auto"), ("--scheme", "sr-nack", "'auto'")),
        (("write-bw", "127.0.0.1", "--scheme", "sr-nack", "--rtt", "0"), ("--rtt",)),
    ],
    ids=[
        "coll-plan",
        "coll-select",
        "coll-run",
        "bitmap-demo",
        "emulate-relay",
        "send-to",
        "iv",
        "write-bw-scheme",
        "write-bw-rtt",
    ],  # fmt: skip
)
def test_bad_value_is_one_line(args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    _assert_one_line_error(_sdr(*args), *needles)


def test_write_bw_server_port_in_use(busy_port: int) -> None:
    _assert_one_line_error(
        _sdr("write-bw", "--port", str(busy_port), "--timeout", "1s"),
        f"cannot listen on TCP 0.0.0.0:{busy_port}",
        "in use",
    )


def test_recv_port_in_use(busy_port: int, tmp_path: Path) -> None:
    result = _sdr("recv", "--out", str(tmp_path / "x.bin"), "--port", str(busy_port))
    _assert_one_line_error(result)
    assert "in use" in result.stderr


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None, reason="needs setpriv to drop root"
)
def test_emulate_tun_without_root() -> None:
    _assert_one_line_error(
        _sdr("emulate", "tun", "--duration", "1s", as_nobody=True), "needs root", "relay"
    )


def test_traceback_on_request() -> None:
    """SDR_TRACEBACK=1 shows the traceback of a user error (for bug reports)."""
    env = {**os.environ, "SDR_TRACEBACK": "1"}
    result = subprocess.run(
        [SDR, "coll-plan", "nope"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert result.returncode == 1
    assert "ConfigError" in result.stderr


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None, reason="needs setpriv to drop root"
)
def test_demo_without_root_says_what_it_runs_instead() -> None:
    """Without root ``sdr demo`` says on stderr that it runs the in-process demo, and why;
    ``--no-fallback`` fails with that reason instead."""
    result = _sdr("demo", as_nobody=True)
    assert result.returncode == 0, result.stderr
    err = " ".join(result.stderr.split())
    assert "needs root" in err and "in-process bitmap demo" in err
    assert "verified" in result.stdout
    _assert_one_line_error(_sdr("demo", "--no-fallback", as_nobody=True), "needs root")


def test_recv_bad_data_port_before_anything_starts(tmp_path: Path) -> None:
    result = _sdr("recv", "--out", str(tmp_path / "x.bin"), "--data-port", "70000")
    _assert_one_line_error(result, "--data-port must be in [0, 65535], got 70000")
    assert "━" not in result.stderr  # refused before the progress bar


def test_recv_bind_takes_host_and_port_as_its_help_shows(tmp_path: Path) -> None:
    """``--bind 127.0.0.1:PORT`` listens there (it was looked up as a host name: a DNS
    error); two different ports in --bind and --port are refused in one line."""
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = str(tmp_path / "x.bin")
    listening = _sdr("recv", "--out", out, "--bind", f"127.0.0.1:{port}", "--timeout", "1",
                     "--json")  # fmt: skip
    assert f'"listening": {port}' in listening.stdout, listening.stdout + listening.stderr
    _assert_one_line_error(listening, "no sender connected within 1 s")
    both = _sdr("recv", "--out", out, "--bind", f"127.0.0.1:{port}", "--port", str(port + 1))
    _assert_one_line_error(both, "two ports")
    _assert_one_line_error(_sdr("recv", "--out", out, "--bind", "127.0.0.1:x"), "--bind port")


def test_a_misspelled_config_section_or_key_is_named_with_the_fix(tmp_path: Path) -> None:
    """Before, ``[reliabilty]`` was reported as an unknown "key" of [reliability]."""
    section = tmp_path / "section.toml"
    section.write_text('[reliabilty]\nscheme = "sr-nack"\n')
    _assert_one_line_error(
        _sdr("send", str(section), "--to", "127.0.0.1:1", "--config", str(section)),
        "no [reliability] table, found [reliabilty]",
        "did you mean [reliability]",
    )
    key = tmp_path / "key.toml"
    key.write_text('[reliability]\nschme = "sr-nack"\n')
    _assert_one_line_error(
        _sdr("send", str(key), "--to", "127.0.0.1:1", "--config", str(key)),
        "unknown [reliability] keys ['schme']",
        "did you mean 'scheme'?",
    )


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("send", "--bogus"), ("No such option: --bogus", "(see 'sdr send -h')")),
        (("select", "--size", "1MiB", "--loss", "abc"), ("'--loss'", "(see 'sdr select -h')")),
        (("send",), ("Missing argument 'FILE'",)),
        (("bogus",), ("No such command 'bogus'", "(see 'sdr -h')")),
    ],
)
def test_option_parser_errors_are_one_line_too(
    args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    """Before, the option parser printed a four-line Usage / Try / Error block (issue 32,
    item 7); docs/quickstart.md promises one ``error: ...`` line and exit status 2."""
    result = _sdr(*args)
    _assert_one_line_error(result, *needles)
    assert "Usage:" not in result.stderr and "Try '" not in result.stderr


def test_a_parity_lane_over_the_message_size_is_refused_before_the_network(tmp_path: Path) -> None:
    """Before, ec-xor with k=8, m=16 passed the checks and the receiver failed mid-transfer
    with "raise QPAttr.max_message_size", which sdr send has no flag for (issue 32, item 3)."""
    data = tmp_path / "one.bin"
    data.write_bytes(b"x" * (1 << 20))
    config = tmp_path / "x.toml"
    config.write_text('[reliability]\nscheme = "ec-xor"\nk = 8\nm = 16\n')
    sent = ["send", str(data), "--to", "127.0.0.1:1", "--config", str(config), "--timeout", "2"]
    _assert_one_line_error(
        _sdr(*sent, "--message-size", "1MiB"),  # the default would hold the lane
        "ec-xor with k=8, m=16",
        "a 1MiB message needs a 2MiB parity lane",
        "use m <= k",
    )
