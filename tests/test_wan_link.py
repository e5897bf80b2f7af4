"""The emulated link with real packets: namespaces + TUN (root) and the UDP relay."""

import json
import socket
import subprocess

import pytest
from wan_helpers import TCP_SINK, TCP_SOURCE, UDP_ECHO_CLIENT, UDP_ECHO_SERVER, spawn

from sdr.backends.udp.roce import decode_packet, encode_packet
from sdr.backends.wan import LinkSpec, RelayLink, TunLink, can_use_namespaces

needs_root = pytest.mark.skipif(bool(can_use_namespaces()), reason=str(can_use_namespaces()))


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("sdrwan")}


@needs_root
def test_udp_round_trips_take_at_least_the_rtt_and_loss_is_counted():
    with TunLink(LinkSpec(rate="1Gbit/s", rtt="20ms", loss=0.2, seed=5)) as link:
        server = spawn(link.ns_b, UDP_ECHO_SERVER, link.addr_b, "1000")
        client = spawn(link.ns_a, UDP_ECHO_CLIENT, link.addr_b, "40")
        rtts = json.loads(client.communicate(timeout=60)[0])
        server.kill()
    summary = link.summary
    lost = summary["a_to_b"]["loss_drops"] + summary["b_to_a"]["loss_drops"]
    assert lost > 0 and len(rtts) < 40
    assert all(rtt >= 0.020 for rtt in rtts)  # never delivered early
    assert summary["a_to_b"]["packets"] >= 40


@needs_root
def test_kernel_tcp_crosses_a_lossy_link_intact():
    with TunLink(LinkSpec(rate="200Mbit/s", rtt="10ms", loss=1e-3, seed=1)) as link:
        sink = spawn(link.ns_b, TCP_SINK, link.addr_b)
        source = spawn(link.ns_a, TCP_SOURCE, link.addr_b, str(4 << 20))
        sent = source.communicate(timeout=60)[0].split()
        received = sink.communicate(timeout=60)[0].split()
    assert sent == received and int(received[0]) == 4 << 20
    assert link.summary["a_to_b"]["packets"] > 400


@needs_root
def test_namespaces_are_removed_even_when_the_body_fails():
    with pytest.raises(RuntimeError), TunLink(LinkSpec()) as link:
        assert link.ns_a in namespaces()
        raise RuntimeError("boom")
    assert link.ns_a not in namespaces() and link.ns_b not in namespaces()
    assert not link.alive


def test_relay_reseals_roce_icrc_and_corruption_stays_detectable():
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for s in (a, b):
        s.bind(("127.0.0.1", 0))
        s.settimeout(5)
    spec = LinkSpec(rate="1Gbit/s", rtt="2ms", corrupt=0.5, seed=3)
    with RelayLink(spec, [a.getsockname()], [b.getsockname()]) as relay:
        to_b = relay.for_a(0)
        forged = encode_packet(("127.0.0.9", 1), to_b, 1, 0, 0, 77, 99, bytes(10))
        a.sendto(forged, to_b)  # ICRC computed for other addresses: dropped at the relay
        verdicts = []
        for i in range(40):
            packet = encode_packet(a.getsockname(), to_b, 0x1234, i, 4096 * i, 77, i, bytes(1000))
            a.sendto(packet, to_b)
            data, sender = b.recvfrom(65536)
            fields, payload, good = decode_packet(data, sender, b.getsockname())
            verdicts.append((fields.imm == i and not any(payload), good))
    corrupted = relay.summary["a_to_b"]["corrupted"]
    assert 5 < corrupted < 35
    assert sum(1 for _, good in verdicts if not good) == corrupted
    assert all(intact for intact, good in verdicts if good)
    assert relay.summary["bad_icrc"] == 1
