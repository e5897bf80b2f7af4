"""``sdr write-bw``: a physically meaningful peak, ``--interval`` lines, unit-named JSON
keys (old ones as aliases), a settable bind address, and the server's ``--timeout``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_client import client_after_server

from sdr.backends.udp.write_bw import PEAK_INTERVAL, WriteBwResult, peak_bandwidth

SDR = str(Path(sys.executable).with_name("sdr"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_peak_ignores_batched_timestamps() -> None:
    """16 messages stamped in one poll (1 us apart) must not make a 100x peak."""
    size, start = 65536, 0.0
    stamps = [1.0 + i * 1e-6 for i in range(16)] + [2.0 + 0.1 * i for i in range(10)]
    peak = peak_bandwidth(stamps, start, size)
    assert peak == pytest.approx(16 * size * 8 / PEAK_INTERVAL)
    assert peak_bandwidth([0.01, 0.02], 0.0, size) == 0.0  # shorter than one interval


def test_result_keys_carry_units_and_the_unitless_ones_are_gone() -> None:
    res = WriteBwResult("server", 10, 1, bw_peak_bps=5.0, bw_average_bps=4.0)
    d = res.as_dict()
    assert d["bw_peak_bps"] == 5.0 and d["bw_average_bps"] == 4.0
    assert "bw_peak" not in d and "bw_average" not in d  # the deprecated aliases left
    assert WriteBwResult.from_dict(d) == res


def test_interval_lines_json_keys_and_bind() -> None:
    port = str(_free_port())
    server = subprocess.Popen(
        [
            SDR,
            "write-bw",
            "--bind",
            "127.0.0.1",
            "--data-port",
            "0",
            "--port",
            port,
            "--interval",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    args = [
        "127.0.0.1",
        "--port",
        port,
        "-n",
        "300",
        "-s",
        "64KiB",
        "--interval",
        "100ms",
        "--json",
    ]
    client, server_out = client_after_server(
        server, lambda: subprocess.run([SDR, "write-bw", *args], capture_output=True, text=True)
    )
    assert "TCP 127.0.0.1:" in server_out
    assert "[server]" in server_out and "sec" in server_out  # iperf3-style lines
    result = json.loads(client.stdout.strip().splitlines()[-1])
    for side in ("server", "client"):
        r = result[side]
        assert r["bw_peak_bps"] >= r["bw_average_bps"] > 0 and "bw_peak" not in r
        assert r["completed"] == 300
        assert r["intervals"], r
        assert sum(row["messages"] for row in r["intervals"]) == 300
        if r["seconds"] >= PEAK_INTERVAL:
            # a peak over >= 100 ms intervals cannot exceed what one interval carried
            best = max(row["bytes"] for row in r["intervals"][:-1] or r["intervals"])
            assert r["bw_peak_bps"] <= max(best * 8 / PEAK_INTERVAL, r["bw_average_bps"]) * 1.01


def test_server_honours_timeout_when_the_client_goes_quiet() -> None:
    """A client that connects and sends nothing: the server gives up after --timeout."""
    port = _free_port()
    server = subprocess.Popen(
        [SDR, "write-bw", "--bind", "127.0.0.1", "--port", str(port), "--timeout", "1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
        with sock:
            out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 2, out + err
    assert "Traceback" not in err
    assert "error: no request from the write-bw client within 1 s" in err
