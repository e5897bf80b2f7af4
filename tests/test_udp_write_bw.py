"""``sdr write-bw`` on loopback (no root needed): perftest columns, and the bytes arrive."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from server_client import client_after_server

from sdr.backends.udp.write_bw import Stamps

CLI = [sys.executable, "-m", "sdr.cli.main", "write-bw"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*client_args: str) -> tuple[str, str]:
    """Run a server (JSON output) and a client; returns both outputs."""
    port = str(_free_port())
    server_cmd = [*CLI, "--data-port", "0", "--port", port, "--timeout", "3s"]
    server = subprocess.Popen(
        [*server_cmd, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client, out = client_after_server(
        server,
        lambda: subprocess.run(
            [*CLI, "127.0.0.1", "--port", port, *client_args], capture_output=True, text=True
        ),
    )
    return client.stdout, out


def test_write_bw_prints_perftest_columns_and_counts_every_byte() -> None:
    client_out, server_out = _run(
        "-s", "70000", "-n", "30", "-m", "8KiB", "--verify", "--report-gbits"
    )
    header = " ".join(client_out.split())
    for column in ("#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]"):
        assert column in header
    assert "MsgRate[Mpps]" in header
    assert "30 messages complete, 0 incomplete" in header
    server = json.loads(server_out.strip().splitlines()[-1])["server"]
    assert server["completed"] == 30 and server["mismatched"] == 0
    assert server["bytes"] == 30 * 70000
    assert server["counters"]["bytes_placed"] == 30 * 70000
    assert server["counters"]["bad_icrc"] == 0
    assert "CPU per GiB (first to last completion, all threads): client" in header
    assert server["cpu_s_per_gib"] > 0  # a process that moved 2 MB used some CPU


def test_cpu_per_gib_counts_only_what_ran_between_the_first_and_last_completion() -> None:
    stamps = Stamps()
    stamps.append(0.0)
    assert stamps.cpu_s_per_gib(2**30) is None  # one completion: no span
    stamps.cpu = [5.0]  # as if 5 CPU s went before the first completion (start-up)
    stamps.append(1.0)
    stamps.cpu[-1] = 5.5
    stamps.append(2.0)
    stamps.cpu[-1] = 6.0
    assert stamps.cpu_s_per_gib(2**29) == 1.0  # 1 CPU s over two messages of 0.5 GiB
    assert stamps.cpu_s_per_gib(0) is None
