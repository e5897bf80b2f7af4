"""``sdr write-bw`` on loopback (no root needed): perftest columns, and the bytes arrive."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from server_client import client_after_server

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
