"""Multipath over the UDP backend: one data port per path, channel c sent to port c % n.

Real sockets on loopback: the datagrams of each channel reach the peer's port for its
path (so an ECMP switch, which hashes the 5-tuple, can route them apart), every port has
its own receive pass, and reliable writes over four paths arrive intact with the SDK's
path selection on.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

import sdr
from sdr.errors import ConfigError, ProtocolError
from sdr.placement import use_datapath
from sdr.runtime import ReliableQP, wait_all

udp = pytest.importorskip("sdr.backends.udp")

ATTR = sdr.QPAttr(
    mtu=4096, chunk_size="16KiB", max_message_size="1MiB", rate_limit="2Gbit/s", channels=4
)


def _pair(paths: int = 4):
    ta = udp.UdpTransport(port=0, seed=1, paths=paths)
    tb = udp.UdpTransport(port=0, seed=2, paths=paths)
    a, b = sdr.Context(backend=ta), sdr.Context(backend=tb)
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    qa.connect(qb.info())
    qb.connect(qa.info())
    return a, b, qa, qb


def test_a_transport_listens_on_one_port_per_path() -> None:
    t = udp.UdpTransport(port=0, paths=3)
    try:
        assert len(set(t.ports)) == 3 and t.ports[0] == t.port
        assert t.info()["ports"] == t.ports
    finally:
        t.close()
    with pytest.raises(ConfigError, match=r"paths must be an integer in \[1, 64\], got 0"):
        udp.UdpTransport(port=0, paths=0)


def _free_port_run(n: int) -> int:
    """A port P with P..P+n-1 free on 127.0.0.1 (at the time of asking)."""
    for _ in range(50):
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        if base + n > 65535:
            continue
        held = []
        try:
            for p in range(base, base + n):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                held.append(sock)
                sock.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    pytest.skip("no run of free UDP ports")


def test_a_fixed_port_takes_the_next_ports_for_the_other_paths() -> None:
    # a firewall or a policy route (the multipath emulator) names them in advance
    base = _free_port_run(3)
    t = udp.UdpTransport(port=base, paths=3)
    try:
        assert t.ports == [base, base + 1, base + 2]
        assert t.info()["ports"] == t.ports
    finally:
        t.close()
    held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held.bind(("127.0.0.1", base + 1))  # another process holds the second port
    try:
        with pytest.raises(sdr.TransportError, match=f"127.0.0.1:{base + 1}: .*in use"):
            udp.UdpTransport(port=base, paths=3)
    finally:
        held.close()
    with pytest.raises(ConfigError, match="ports 65534..65537 go past 65535"):
        udp.UdpTransport(port=65534, paths=4)


@pytest.mark.parametrize("datapath", ["native", "python"])
@pytest.mark.parametrize("multipath", [True, False])
def test_reliable_writes_over_four_paths_arrive_intact(datapath, multipath) -> None:
    previous = use_datapath(datapath)
    a, b, qa, qb = _pair()
    try:
        cfg = {"rtt": "5ms", "multipath": multipath}
        s, r = ReliableQP(qa, "sr-nack", **cfg), ReliableQP(qb, "sr-nack", **cfg)
        rng = np.random.default_rng(3)
        srcs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (1 << 20, 70_000, 1)]
        dsts = [np.zeros_like(x) for x in srcs]
        handles = [r.post_recv(b.register(d)) for d in dsts]
        handles += [s.write(a.register(x)) for x in srcs]
        wait_all(handles, timeout=60)
        assert all((x == d).all() for x, d in zip(srcs, dsts, strict=True))
        # every path carried data: each of the receiver's ports had its own datagrams
        per_port = b.transport.port_datagrams
        assert all(n > 0 for n in per_port), per_port
        if multipath:
            assert s.connection.paths is not None
            assert all(p.acked > 0 for p in s.connection.paths.selector.stats)
    finally:
        use_datapath(previous)
        a.close()
        b.close()


def _info(qp) -> dict:
    return json.loads(qp.info())


@pytest.mark.parametrize(
    ("ports", "words"),
    [
        ("9", "transport.ports must be a JSON array"),
        ([], "must list distinct ports starting with port"),
        ([1, 2], "must list distinct ports starting with port"),
        (None, "transport.ports must be a JSON array"),
        ([0], "transport.ports[0]"),
    ],
)
def test_a_peer_with_bad_ports_is_refused_naming_the_field(ports, words) -> None:
    a, b, qa, qb = _pair(paths=1)
    try:
        info = _info(qb)
        info["transport"]["ports"] = ports
        fresh = a.create_qp(ATTR)
        with pytest.raises((ProtocolError, ConfigError), match=words.replace("[", r"\[")):
            fresh.connect(json.dumps(info).encode())
        assert not fresh.connected
    finally:
        a.close()
        b.close()
