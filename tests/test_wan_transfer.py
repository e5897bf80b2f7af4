"""Real SDR file transfers: two processes, UDP backend, a reliability scheme, verified bytes."""

import json
import subprocess
import sys

import pytest

from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces
from sdr.cli.wan_transfer import ROOT, make_payload, transfer_over_link

needs_root = pytest.mark.skipif(bool(can_use_namespaces()), reason=str(can_use_namespaces()))


def test_send_recv_on_loopback_between_two_processes(tmp_path):
    source = make_payload(tmp_path / "in.bin", 3 << 20, seed=4)
    out = tmp_path / "out.bin"
    cli = [sys.executable, "-m", "sdr.cli.main"]
    receiver = subprocess.Popen(
        [
            *cli,
            "recv",
            "--out",
            str(out),
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--json",
            "--timeout",
            "60",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    port = json.loads(receiver.stdout.readline())["listening"]
    sender = subprocess.run(
        [
            *cli,
            "send",
            str(source),
            "--to",
            f"127.0.0.1:{port}",
            "--json",
            "--scheme",
            "ec-xor",
            "--rtt",
            "2ms",
            "--rate",
            "2Gbit/s",
            "--message-size",
            "1MiB",
            "--timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert sender.returncode == 0, sender.stderr
    report = json.loads(sender.stdout.splitlines()[-1])["report"]
    assert receiver.wait(60) == 0
    assert out.read_bytes() == source.read_bytes()
    assert report["scheme"] == "ec-xor" and report["bytes"] == 3 << 20
    assert report["stats"]["chunks_sent_lane1"] > 0  # parity went out


@needs_root
@pytest.mark.parametrize("scheme", ["sr-nack", "ec-mds", "auto"])
def test_transfer_across_a_lossy_emulated_link(tmp_path, scheme):
    source = make_payload(tmp_path / "in.bin", 4 << 20, seed=1)
    out = tmp_path / "out.bin"
    with TunLink(LinkSpec(rate="500Mbit/s", rtt="10ms", loss=0.01, seed=3)) as link:
        report = transfer_over_link(
            link,
            source,
            out,
            [
                "--scheme",
                scheme,
                "--rate",
                "500Mbit/s",
                "--rtt",
                "10ms",
                "--loss",
                "0.01",
                "--message-size",
                "2MiB",
            ],
            timeout=120,
        )
    assert out.read_bytes() == source.read_bytes()
    assert report["receiver"]["sha256"] == report["sha256"]
    assert link.summary["a_to_b"]["loss_drops"] > 0
    assert report["completion_s"] > 0.010  # at least one round trip
    if scheme == "auto":
        assert report["scheme"] in ("sr-rto", "sr-nack", "ec-mds", "ec-xor")
