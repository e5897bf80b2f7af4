"""Forged and stray packets through real UDP sockets never write; connections are keyed.

A receive is posted in the middle of a registered region whose rest is a guard band
(0xA5). Every forged datagram (wrong QPN, rkey, generation, message id, source address,
ICRC) must leave the whole region untouched and be counted by reason; a valid packet from
the peer, sent last, must land (so the check can see a write at all).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import numpy as np
import pytest

import sdr
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.roce import encode_packet

ATTR = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB", channels=2)
GUARD = 0xA5
POSTED = slice(8192, 8192 + 4096)


class Rig:
    """A connected pair on loopback and a receive with guard bands around it."""

    def __init__(self) -> None:
        self.ta, self.tb = UdpTransport(port=0), UdpTransport(port=0)
        self.a, self.b = sdr.Context(backend=self.ta), sdr.Context(backend=self.tb)
        self.qa, self.qb = self.a.create_qp(ATTR), self.b.create_qp(ATTR)
        self.qa.connect(self.qb.info())
        self.qb.connect(self.qa.info())
        self.region = np.full(32768, GUARD, dtype=np.uint8)
        mr = self.b.register(self.region)
        self.rh = self.qb.post_recv(mr, POSTED.start, POSTED.stop - POSTED.start)
        self.settle()
        self.stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.stranger.bind(("127.0.0.1", 0))

    def settle(self, rounds: int = 30) -> None:
        for _ in range(rounds):
            self.a.progress()
            self.b.progress()

    def send(self, sock: socket.socket | None = None, icrc_src: tuple | None = None, **f) -> None:  # type: ignore[no-untyped-def]
        """One packet for the posted receive, fields overridden by ``f``."""
        rec, tqp = self.rh.record, self.qb.transport_qp
        gen = f.pop("gen", rec.generation)
        fields = {
            "qpn": tqp.qpns[gen][0],
            "rkey": tqp.rkeys[gen],
            "va": rec.slot * ATTR.max_message_size,
            "imm": rec.msg_id << 22,
        }
        fields.update(f)
        sock = sock or self.ta.data_socket
        src = icrc_src or sock.getsockname()
        dst = ("127.0.0.1", self.tb.port)
        payload = bytes([0xEE]) * 1024
        pkt = encode_packet(
            src, dst, fields["qpn"], 0, fields["va"], fields["rkey"], fields["imm"], payload
        )
        sock.sendto(pkt, dst)

    def guard_intact(self) -> bool:
        outside = np.ones(len(self.region), dtype=bool)
        outside[POSTED] = False
        return bool((self.region[outside] == GUARD).all())

    def close(self) -> None:
        self.stranger.close()
        self.a.close()
        self.b.close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    try:
        yield r
    finally:
        r.close()


def test_forged_packets_never_write_and_are_counted(rig: Rig) -> None:
    tqp, rec = rig.qb.transport_qp, rig.rh.record
    other = (rec.generation + 1) % ATTR.generations
    rig.send(qpn=(tqp.qpns[rec.generation][0] ^ 0x5A5A5) or 7)  # QPN nobody owns
    rig.send(rkey=tqp.rkeys[rec.generation] ^ 0x1)  # wrong rkey
    rig.send(gen=other)  # another generation: its key entry is NULL
    rig.send(qpn=tqp.qpns[other][0])  # another generation's QPN with this one's rkey
    rig.send(imm=((rec.msg_id + 1) % 1024) << 22)  # another message id
    base = rec.slot * ATTR.max_message_size
    rig.send(va=base + 4096, imm=rec.msg_id << 22 | 4 << 4)  # packet 4: past the posted length
    rig.send(va=base + 1024)  # address of packet 1, immediate of packet 0
    rig.send(sock=rig.stranger)  # right QPN, rkey, ICRC for its own address: wrong source
    rig.send(sock=rig.stranger, icrc_src=rig.ta.data_socket.getsockname())  # spoofed ICRC
    rig.send(icrc_src=rig.stranger.getsockname())  # right source, ICRC of another address
    rig.settle()
    c = rig.qb.counters()
    assert rig.guard_intact()
    assert (rig.region[POSTED] == GUARD).all(), "a forged packet was written"
    assert c["udp_unknown_qpn"] == 1
    assert c["bad_rkey"] == 2
    assert c["late"] == 2  # NULL entry of the other generation, and the wrong message id
    assert c["out_of_range"] == 1 and c["malformed"] == 1
    assert c["bad_source"] == 2
    assert c["bad_icrc"] == 1
    assert c["packets_accepted"] == 0 and rig.qb.transport_qp.stats["packets_placed"] == 0
    rig.send()  # the real thing, from the peer: written
    rig.settle()
    assert rig.qb.transport_qp.stats["packets_placed"] == 1
    assert (rig.region[POSTED][:1024] == 0xEE).all() and rig.guard_intact()


def test_packets_after_completion_and_from_closed_qps_never_write(rig: Rig) -> None:
    rig.rh.complete()  # the receive is released: its key entry is NULL
    rig.send()
    rig.settle()
    assert rig.qb.counters()["late"] == 1 and (rig.region[POSTED] == GUARD).all()
    old_qpn = rig.qb.transport_qp.qpns[rig.rh.record.generation][0]
    rig.qb.close()  # the QP is gone: its QPNs are unknown from now on
    rig.send(qpn=old_qpn)
    rig.settle()
    assert rig.tb.transport_counters()["unknown_qpn"] == 1
    assert (rig.region == GUARD).all()


def test_qpns_and_rkeys_are_random_per_connection() -> None:
    seen_qpns, seen_rkeys = [], []
    for _ in range(2):
        with sdr.Context(backend=UdpTransport(port=0)) as ctx:
            for _ in range(2):
                info = json.loads(ctx.create_qp(ATTR).info())["transport"]
                seen_qpns.append({q for gen in info["qpns"] for q in gen})
                seen_rkeys.append(set(info["rkeys"]))
    for i in range(len(seen_qpns)):
        for j in range(i + 1, len(seen_qpns)):
            assert not seen_qpns[i] & seen_qpns[j], "two connections share a QPN"
            assert not seen_rkeys[i] & seen_rkeys[j], "two connections share an rkey"
    assert all(len(r) == ATTR.generations for r in seen_rkeys)  # one rkey per generation


SECRET = "a shared secret of 32 bytes....."


def test_connection_setup_is_authenticated_when_a_secret_is_configured() -> None:
    with (
        sdr.Context(UdpTransport(port=0), secret=SECRET) as a,
        sdr.Context(UdpTransport(port=0), secret=SECRET) as b,
        sdr.Context(UdpTransport(port=0), secret="another secret, also long") as c,
        sdr.Context(UdpTransport(port=0)) as plain,
    ):
        qa, qb, qc, qp = (ctx.create_qp(ATTR) for ctx in (a, b, c, plain))
        info = qb.info()
        with pytest.raises(sdr.ProtocolError, match="authentication"):
            qc.connect(info)  # wrong secret
        altered = json.loads(info)
        altered["transport"]["port"] += 1  # redirect the data path
        with pytest.raises(sdr.ProtocolError, match="authentication"):
            qa.connect(json.dumps(altered).encode())
        with pytest.raises(sdr.ProtocolError, match="not authenticated"):
            qa.connect(qp.info())  # a peer without the secret
        altered = json.loads(info)
        altered["hmac"] = "\u00e9" * 64  # not ASCII: compare_digest raised TypeError
        with pytest.raises(sdr.ProtocolError, match="not authenticated"):
            qa.connect(json.dumps(altered).encode())
        assert not qa.connected and not qc.connected
        qa.connect(info)
        assert qa.connected
    with pytest.raises(sdr.ConfigError):
        sdr.Context("inproc", secret="short")


def test_control_messages_from_strangers_are_dropped(rig: Rig) -> None:
    control = rig.qb.transport_qp.control_id.to_bytes(4, "big")
    port = rig.tb.control_port
    for _ in range(100):
        rig.stranger.sendto(control + bytes([1]) * 24, ("127.0.0.1", port))
    rig.stranger.sendto(b"\0\0\0\0junk", ("127.0.0.1", port))
    rig.settle()
    stats = rig.tb.transport_counters()
    assert stats["control_bad_source"] == 100
    assert stats["control_unknown"] == 1
    assert rig.qb.counters()["control_malformed"] == 0  # nothing reached the core
