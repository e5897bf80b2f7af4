"""Real SDR file transfers: two processes, UDP backend, a reliability scheme, verified bytes."""

import hashlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import blake3
import pytest

from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces
from sdr.cli.wan_transfer import ROOT, _receiver_error, make_payload, transfer_over_link

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
    assert report["receiver"]["digest"] == report["digest"]
    assert link.summary["a_to_b"]["loss_drops"] > 0
    assert report["completion_s"] > 0.010  # at least one round trip
    if scheme == "auto":
        assert report["scheme"] in ("sr-rto", "sr-nack", "ec-mds", "ec-xor")


def _free_udp_ports(n):
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_send_recv_through_the_udp_relay_without_root(tmp_path):
    """The docs/wan-emulator.md recipe: ``sdr emulate relay --map`` then ``sdr recv`` and
    ``sdr send`` with ``--relay``; the file arrives (SHA-256) and the relay carried it."""
    sdr = str(pathlib.Path(sys.executable).with_name("sdr"))
    source = make_payload(tmp_path / "in.bin", 3 << 20, seed=5)
    out = tmp_path / "out.bin"
    relay_map = tmp_path / "relay.json"
    a_data, a_ctl, b_data, b_ctl = _free_udp_ports(4)
    relay = subprocess.Popen(
        [sdr, "emulate", "relay", "--a", f"127.0.0.1:{a_data}", "--a", f"127.0.0.1:{a_ctl}",
         "--b", f"127.0.0.1:{b_data}", "--b", f"127.0.0.1:{b_ctl}", "--rate", "200Mbit/s",
         "--rtt", "10ms", "--loss", "1e-3", "--seed", "7", "--map", str(relay_map),
         "--duration", "120s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    receiver = subprocess.Popen(
        [sdr, "recv", "--out", str(out), "--bind", "127.0.0.1", "--port", "0", "--json",
         "--relay", str(relay_map), "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        port = json.loads(receiver.stdout.readline())["listening"]
        sender = subprocess.run(
            [sdr, "send", str(source), "--to", f"127.0.0.1:{port}", "--relay", str(relay_map),
             "--scheme", "sr-nack", "--rate", "200Mbit/s", "--rtt", "10ms", "--json",
             "--timeout", "60"],
            capture_output=True, text=True, cwd=tmp_path, timeout=120,
        )  # fmt: skip
        if sender.returncode != 0:  # say the receiver's side too: it names the cause
            receiver.kill()
            raise AssertionError(f"sender: {sender.stderr}\nreceiver: {receiver.communicate()}")
        assert receiver.wait(60) == 0, receiver.communicate()
    finally:
        receiver.kill()
        relay.send_signal(signal.SIGTERM)
        relay_out, relay_err = relay.communicate(timeout=60)
    assert relay.returncode == 0, relay_err
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest
    sent = json.loads(sender.stdout.splitlines()[-1])["report"]
    assert sent["digest_algorithm"] == "blake3"
    assert sent["digest"] == blake3.blake3(source.read_bytes()).hexdigest()
    assert "map written to" in relay_out
    summary = json.loads(relay_out[relay_out.index("\n{") :])
    # every data packet crossed the relay: at least the file's worth of 4 KiB packets
    assert summary["a_to_b"]["packets"] >= (3 << 20) // 8192, summary
    assert summary["b_to_a"]["packets"] > 0 and summary["bad_icrc"] == 0, summary
    assert not relay_map.exists()  # removed when the relay stops


def _write_bw_through_relay(tmp_path, relay_args, client_args):
    """``sdr write-bw`` through ``sdr emulate relay``: (the client's JSON, the relay's
    summary)."""
    sdr = str(pathlib.Path(sys.executable).with_name("sdr"))
    relay_map = tmp_path / "relay.json"
    a_data, a_ctl, b_data, b_ctl = _free_udp_ports(4)
    tcp = _free_udp_ports(1)[0]  # a free number; the server binds it for TCP
    relay = subprocess.Popen(
        [sdr, "emulate", "relay", "--a", f"127.0.0.1:{a_data}", "--a", f"127.0.0.1:{a_ctl}",
         "--b", f"127.0.0.1:{b_data}", "--b", f"127.0.0.1:{b_ctl}", "--rate", "1Gbit/s",
         "--rtt", "10ms", "--map", str(relay_map), "--duration", "120s", *relay_args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    server = subprocess.Popen(
        [sdr, "write-bw", "--bind", "127.0.0.1", "--port", str(tcp), "--relay", str(relay_map),
         "--timeout", "30s", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        for _ in range(100):  # until the server listens (it waits for the map first)
            client = subprocess.run(
                [sdr, "write-bw", "127.0.0.1", "--port", str(tcp), "--relay", str(relay_map),
                 "--verify", "--timeout", "30s", "--json", *client_args],
                capture_output=True, text=True, cwd=tmp_path, timeout=120,
            )  # fmt: skip
            if "cannot reach" not in client.stderr:
                break
            time.sleep(0.1)
        assert client.returncode == 0, client.stderr
        assert server.wait(60) == 0, server.communicate()
    finally:
        server.kill()
        relay.send_signal(signal.SIGTERM)
        relay_out, relay_err = relay.communicate(timeout=60)
    summary = json.loads(relay_out[relay_out.index("\n{") :])
    return json.loads(client.stdout.strip().splitlines()[-1]), summary


def test_write_bw_through_the_udp_relay_without_root(tmp_path):
    """``sdr write-bw --relay``: server (side b) and client (side a) exchange QP info over
    TCP directly; every message's packets cross the relay, and all are verified."""
    result, summary = _write_bw_through_relay(
        tmp_path, [], ["-n", "50", "-s", "64KiB", "--rate", "100Mbit/s"]
    )
    assert result["server"]["completed"] == 50 and result["server"]["mismatched"] == 0
    assert summary["a_to_b"]["packets"] >= 50 * (64 << 10) // 4096, summary


def test_write_bw_with_a_scheme_delivers_every_message_over_a_lossy_relay(tmp_path):
    """``sdr write-bw --scheme sr-nack``: 2% of the packets lost, every message completes
    verified at both ends (its lost chunks resent), and the pattern arrives intact."""
    result, summary = _write_bw_through_relay(
        tmp_path,
        ["--loss", "2e-2", "--seed", "5"],
        ["-n", "12", "-s", "1MiB", "-m", "4KiB", "--chunk", "16KiB", "--rate", "200Mbit/s",
         "--scheme", "sr-nack", "--rtt", "10ms"],
    )  # fmt: skip
    server, client = result["server"], result["client"]
    assert server["completed"] == client["completed"] == 12 and server["mismatched"] == 0
    assert summary["a_to_b"]["loss_drops"] > 0, summary
    assert client["counters"]["reliable_writes_completed"] == 12
    assert client["counters"]["reliable_write_chunks_retransmitted"] > 0
    assert server["counters"]["reliable_receives_completed"] == 12


def test_a_failed_transfer_names_the_receivers_error_too():
    # the sender only learns that the receiver gave a message up ("see the receiver's
    # error"); the report of a failed transfer carries the receiver's own words
    code = "import sys; sys.stderr.write('error: receive seq 3: not complete\\n'); sys.exit(1)"
    gone = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    assert _receiver_error(gone) == "; receiver: error: receive seq 3: not complete"
    alive = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert _receiver_error(alive, wait_s=0.1) == ""  # still waiting: nothing to say yet
    finally:
        alive.kill()
        alive.wait()


def test_children_get_the_folder_that_holds_the_package_not_the_package() -> None:
    """With the sdr package folder itself first on a child's path (and as its working
    directory), sdr/torch stood in for torch and sdr/errors.py for any ``errors``."""
    from sdr.cli.wan_transfer import _env

    first = _env()["PYTHONPATH"].split(os.pathsep)[0]
    assert (pathlib.Path(first) / "sdr" / "__init__.py").is_file(), first
    pytest.importorskip("torch")
    found = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__file__)"],
        env=_env(), cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert pathlib.Path(found.strip()).parent != pathlib.Path(first) / "sdr" / "torch", found
