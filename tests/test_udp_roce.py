"""RoCEv2 codec of the UDP backend: header layout, padding, ICRC (cross-checked two ways)."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest

from sdr.backends.udp.roce import (
    HEADER_SIZE,
    UC_RDMA_WRITE_ONLY_IMM,
    IcrcPrefix,
    decode_packet,
    encode_packet,
    wire_length,
)

SRC = ("127.0.0.1", 50000)
DST = ("127.0.0.2", 4791)


def reference_icrc(ip_udp_roce: bytes) -> int:
    """ICRC of a full IPv4/UDP/RoCE packet (without its ICRC), written from the spec text:
    CRC-32 over 8 bytes of ones, the IP header with TOS, TTL, checksum set to ones, the UDP
    header with checksum set to ones, the BTH with byte 4 (FECN, BECN, resv6) set to ones."""
    pkt = bytearray(ip_udp_roce)
    ihl = (pkt[0] & 0x0F) * 4
    pkt[1] = 0xFF  # TOS
    pkt[8] = 0xFF  # TTL
    pkt[10:12] = b"\xff\xff"  # IP header checksum
    pkt[ihl + 6 : ihl + 8] = b"\xff\xff"  # UDP checksum
    pkt[ihl + 8 + 4] = 0xFF  # BTH F|B|resv6
    return zlib.crc32(b"\xff" * 8 + bytes(pkt))


def ip_udp(src: tuple[str, int], dst: tuple[str, int], udp_payload: bytes, ttl: int = 64) -> bytes:
    """The IPv4 + UDP headers Linux emits for a DF datagram (id 0), with real-looking TTL."""
    total = 20 + 8 + len(udp_payload)
    ip = struct.pack("!BBHHHBBH", 0x45, 0, total, 0, 0x4000, ttl, 17, 0x1234)
    ip += socket.inet_aton(src[0]) + socket.inet_aton(dst[0])
    udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(udp_payload), 0xBEEF)
    return ip + udp


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 63, 1024, 4097, 9000])
def test_layout_and_icrc_match_the_spec_reference(size: int) -> None:
    payload = bytes(range(256)) * (size // 256 + 1)
    payload = payload[:size]
    pkt = encode_packet(SRC, DST, 0xABCDEF, 0x123456, 0x10_0000, 0xDEADBEEF, 0xCAFEF00D, payload)
    assert len(pkt) == wire_length(size)
    opcode, flags, pkey, qpn, psn, va, rkey, dlen, imm = struct.unpack_from("!BBHIIQIII", pkt)
    assert opcode == UC_RDMA_WRITE_ONLY_IMM == 0x2B
    assert (flags >> 4) & 3 == -size & 3 and pkey == 0xFFFF
    assert qpn == 0xABCDEF and psn == 0x123456  # reserved byte and AckReq are zero
    assert (va, rkey, dlen, imm) == (0x10_0000, 0xDEADBEEF, size, 0xCAFEF00D)
    assert pkt[HEADER_SIZE : HEADER_SIZE + size] == payload
    assert pkt[HEADER_SIZE + size : -4] == b"\0" * (-size & 3)
    full = ip_udp(SRC, DST, pkt)
    assert struct.unpack("<I", pkt[-4:])[0] == reference_icrc(full + pkt[:-4])


def test_icrc_ignores_variant_fields_only() -> None:
    pkt = encode_packet(SRC, DST, 7, 0, 0, 1, 2, b"x" * 100)
    good = struct.unpack("<I", pkt[-4:])[0]
    base = ip_udp(SRC, DST, pkt)
    assert reference_icrc(ip_udp(SRC, DST, pkt, ttl=3) + pkt[:-4]) == good
    flipped = bytearray(pkt)
    flipped[4] = 0xC0  # FECN/BECN set on the way: still the same ICRC
    assert reference_icrc(base + bytes(flipped[:-4])) == good
    other_port = ip_udp(SRC, ("127.0.0.2", 4792), pkt)
    assert reference_icrc(other_port + pkt[:-4]) != good


def test_decode_checks_icrc_and_rejects_other_opcodes() -> None:
    payload = b"payload!" * 3 + b"odd"
    pkt = encode_packet(SRC, DST, 42, 9, 4096, 77, 0x01020304, payload)
    fields, body, good = decode_packet(pkt, SRC, DST)
    assert good is True and bytes(body) == payload
    assert (fields.dest_qpn, fields.psn, fields.va, fields.rkey, fields.imm) == (
        42,
        9,
        4096,
        77,
        0x01020304,
    )
    assert decode_packet(pkt, SRC, ("127.0.0.3", 4791))[2] is False  # other destination
    corrupted = bytearray(pkt)
    corrupted[HEADER_SIZE + 5] ^= 1
    assert decode_packet(bytes(corrupted), SRC, DST)[2] is False
    corrupted = bytearray(pkt)
    corrupted[0] = 0x04  # RC RDMA WRITE First
    with pytest.raises(ValueError, match="opcode"):
        decode_packet(bytes(corrupted))
    with pytest.raises(ValueError, match="shorter"):
        decode_packet(pkt[:20])


def test_prefix_state_is_cached_per_length() -> None:
    prefix = IcrcPrefix(SRC, DST)
    assert prefix.state(100) == prefix.state(100) != prefix.state(104)


def test_matches_scapy_roce_layer() -> None:
    """A third, independent implementation (scapy's RoCE layer) computes the same ICRC."""
    scapy_all = pytest.importorskip("scapy.all", reason="scapy not installed (test extra)")
    roce = pytest.importorskip("scapy.contrib.roce")
    for size in (0, 5, 1000, 8192):
        payload = bytes(i % 251 for i in range(size))
        pkt = encode_packet(SRC, DST, 0x123456, 77, 0x1000, 0xDEADBEEF, 0xABCDEF01, payload)
        built = scapy_all.raw(
            scapy_all.IP(src=SRC[0], dst=DST[0], id=0, flags="DF")
            / scapy_all.UDP(sport=SRC[1], dport=DST[1])
            / roce.BTH(opcode=0x2B, padcount=-size & 3, dqpn=0x123456, psn=77)
            / scapy_all.Raw(pkt[12:-4])
        )
        assert built[28:] == pkt
