"""The kernel TCP peer of the WAN benchmarks writes what it receives, as `sdr recv` does."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.peers.tcp_peer import payload
from sdr.backends.shm.bootstrap import free_port

ROOT = Path(__file__).resolve().parents[1]


def _transfer(size: int, *recv_args: str) -> dict:
    port = str(free_port())
    peer = [sys.executable, "-m", "benchmarks.peers.tcp_peer"]
    receiver = subprocess.Popen(
        [*peer, "recv", "--bind", "127.0.0.1", "--port", port, *recv_args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        assert '"ready"' in receiver.stdout.readline()
        subprocess.run(
            [*peer, "send", "--to", "127.0.0.1", "--port", port, "--size", str(size)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=60,
        )
        out, _ = receiver.communicate(timeout=60)
    finally:
        if receiver.poll() is None:
            receiver.kill()
    return json.loads(out.splitlines()[-1])


def test_the_receiver_writes_every_byte_into_the_new_file(tmp_path: Path) -> None:
    size = (5 << 20) + 123  # more than one receive buffer, and a ragged end
    out = tmp_path / "received.bin"
    got = _transfer(size, "--out", str(out))
    data = out.read_bytes()
    assert got["bytes"] == size and data == payload(size)
    assert got["sha256"] == hashlib.sha256(data).hexdigest()


def test_without_out_the_receiver_hashes_the_stream() -> None:
    got = _transfer(1 << 20)
    assert got["bytes"] == 1 << 20
    assert got["sha256"] == hashlib.sha256(payload(1 << 20)).hexdigest()
