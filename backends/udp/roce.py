"""The RoCEv2 wire format of one SDR packet, and its invariant CRC (ICRC).

Every SDR packet is an InfiniBand UC "RDMA WRITE Only with Immediate" carried in UDP
(IANA port 4791), IPv4, as a RoCEv2 NIC would put it on the wire::

    IPv4 | UDP | BTH (12) | RETH (16) | ImmDt (4) | payload | pad (0-3) | ICRC (4)

BTH: opcode, SE|M|PadCnt|TVer, P_Key, F|B|resv6, destination QPN, A|resv7, PSN.
RETH: virtual address (the remote offset in the receiver's key space), R_Key, DMA length.

The ICRC is a CRC-32 (the Ethernet/zlib polynomial) over a pseudo packet: 8 bytes of
0xFF standing in for the InfiniBand LRH, then the IPv4 header with TOS, TTL and header
checksum set to all ones, the UDP header with its checksum set to all ones, the BTH with
its F|B|resv6 byte set to all ones, and everything after the BTH up to the ICRC. It is
stored least-significant byte first. The IP and UDP parts do not depend on the packet
contents beyond its length, so :class:`IcrcPrefix` computes them once per
(source, destination, length) and the per-packet work is two CRC updates.

The sender's kernel produces the IPv4 header; the codec predicts it: 20 bytes without
options, identification 0 and "don't fragment" set (what Linux emits for an unconnected
UDP socket with IP_PMTUDISC_DO), protocol UDP.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

import numpy as np

from sdr.crc import crc32  # ISA-L's where installed (~5x zlib's), same value

__all__ = [
    "ROCE_PORT",
    "UC_RDMA_WRITE_ONLY_IMM",
    "HEADER",
    "HEADER_SIZE",
    "HEADER_DTYPE",
    "ICRC_SIZE",
    "IP_UDP_OVERHEAD",
    "DEFAULT_PKEY",
    "RocePacket",
    "IcrcPrefix",
    "crc32",
    "encode_header",
    "encode_packet",
    "icrc_of",
    "decode_packet",
    "wire_length",
]

ROCE_PORT = 4791
UC_RDMA_WRITE_ONLY_IMM = 0x2B  # UC (0b001 << 5) | RDMA WRITE Only with Immediate (0b01011)
DEFAULT_PKEY = 0xFFFF
HEADER = struct.Struct("!BBHIIQIII")
"""BTH (opcode, flags, pkey, resv8|dqpn, ackreq|psn), RETH (va, rkey, dmalen), ImmDt."""
HEADER_SIZE = HEADER.size  # 12 + 16 + 4 = 32
HEADER_DTYPE = np.dtype(
    [
        ("opcode", "u1"),
        ("flags", "u1"),
        ("pkey", ">u2"),
        ("qpn", ">u4"),
        ("psn", ">u4"),
        ("va", ">u8"),
        ("rkey", ">u4"),
        ("dlen", ">u4"),
        ("imm", ">u4"),
    ]
)
"""The same 32 header bytes as a NumPy record, for building and parsing whole batches."""
assert HEADER_DTYPE.itemsize == HEADER_SIZE
ICRC_SIZE = 4
IP_UDP_OVERHEAD = 20 + 8
_PSEUDO_LRH = b"\xff" * 8
_IP_DF = 0x4000
_BTH_RESV8_MASK = 0xFF000000
_QPN_MASK = 0xFFFFFF
_PSN_MASK = 0xFFFFFF
_ICRC = struct.Struct("<I")


def wire_length(payload_len: int) -> int:
    """UDP payload bytes of a packet carrying ``payload_len`` bytes (headers, pad, ICRC)."""
    return HEADER_SIZE + payload_len + (-payload_len & 3) + ICRC_SIZE


@dataclass(frozen=True, slots=True)
class RocePacket:
    """The fields of one decoded packet (payload excluded)."""

    opcode: int
    pad: int
    pkey: int
    dest_qpn: int
    psn: int
    va: int
    rkey: int
    dma_len: int
    imm: int


class IcrcPrefix:
    """CRC-32 states after the pseudo LRH, IPv4 and UDP headers of one address pair.

    src/dst are (IPv4 address, UDP port). States are cached per UDP payload length.
    """

    __slots__ = ("_ip", "_ports", "_cache")

    def __init__(self, src: tuple[str, int], dst: tuple[str, int]) -> None:
        self._ip = socket.inet_aton(src[0]) + socket.inet_aton(dst[0])
        self._ports = (src[1], dst[1])
        self._cache: dict[int, int] = {}

    def state(self, udp_payload_len: int) -> int:
        """The running CRC after the masked IP and UDP headers of a datagram of that size."""
        cached = self._cache.get(udp_payload_len)
        if cached is not None:
            return cached
        udp_len = 8 + udp_payload_len
        ip_hdr = struct.pack(
            "!BBHHHBBH", 0x45, 0xFF, 20 + udp_len, 0, _IP_DF, 0xFF, socket.IPPROTO_UDP, 0xFFFF
        )
        udp_hdr = struct.pack("!HHHH", self._ports[0], self._ports[1], udp_len, 0xFFFF)
        value = crc32(_PSEUDO_LRH + ip_hdr + self._ip + udp_hdr)
        if len(self._cache) < 4096:
            self._cache[udp_payload_len] = value
        return value


def _masked_header(header: bytes | bytearray | memoryview) -> bytes:
    """The 32 header bytes as the ICRC sees them: BTH byte 4 (F|B|resv6) all ones."""
    raw = bytes(header[:HEADER_SIZE])
    return raw[:4] + b"\xff" + raw[5:]


def encode_header(
    buf: bytearray | memoryview,
    dest_qpn: int,
    psn: int,
    va: int,
    rkey: int,
    payload_len: int,
    imm: int,
    pkey: int = DEFAULT_PKEY,
) -> None:
    """Write the 32 header bytes (BTH, RETH, ImmDt) of one packet into ``buf``."""
    pad = -payload_len & 3
    HEADER.pack_into(
        buf,
        0,
        UC_RDMA_WRITE_ONLY_IMM,
        pad << 4,
        pkey,
        dest_qpn & _QPN_MASK,
        psn & _PSN_MASK,
        va,
        rkey,
        payload_len,
        imm,
    )


def icrc_of(prefix_state: int, header: bytes | bytearray | memoryview, payload: object) -> int:
    """ICRC of a packet given the IP/UDP prefix state, its 32 header bytes and its payload.

    The payload is followed by its pad bytes (zeros), which the ICRC covers as well.
    """
    value = crc32(_masked_header(header), prefix_state)
    value = crc32(payload, value)
    pad = -len(memoryview(payload)) & 3  # type: ignore[arg-type]
    return crc32(b"\0" * pad, value) if pad else value


def encode_packet(
    src: tuple[str, int],
    dst: tuple[str, int],
    dest_qpn: int,
    psn: int,
    va: int,
    rkey: int,
    imm: int,
    payload: bytes | bytearray | memoryview,
) -> bytes:
    """One complete UDP payload (headers, payload, pad, ICRC). Slow path: tests, tools."""
    header = bytearray(HEADER_SIZE)
    encode_header(header, dest_qpn, psn, va, rkey, len(payload), imm)
    pad = -len(payload) & 3
    state = IcrcPrefix(src, dst).state(wire_length(len(payload)))
    icrc = icrc_of(state, header, payload)
    return bytes(header) + bytes(payload) + b"\0" * pad + _ICRC.pack(icrc)


def decode_packet(
    data: bytes | bytearray | memoryview,
    src: tuple[str, int] | None = None,
    dst: tuple[str, int] | None = None,
) -> tuple[RocePacket, memoryview, bool | None]:
    """Parse one UDP payload: (fields, payload view, ICRC good or None when not checked).

    Raises ValueError for a datagram too short or not UC RDMA WRITE Only with Immediate.
    """
    view = memoryview(data)
    if len(view) < HEADER_SIZE + ICRC_SIZE:
        raise ValueError(f"datagram of {len(view)} bytes is shorter than RoCE headers + ICRC")
    opcode, flags, pkey, qpn, psn, va, rkey, dma_len, imm = HEADER.unpack_from(view)
    if opcode != UC_RDMA_WRITE_ONLY_IMM:
        raise ValueError(f"opcode {opcode:#04x} is not UC RDMA WRITE Only with Immediate (0x2b)")
    pad = (flags >> 4) & 3
    end = len(view) - ICRC_SIZE
    payload = view[HEADER_SIZE : end - pad]
    fields = RocePacket(opcode, pad, pkey, qpn & _QPN_MASK, psn & _PSN_MASK, va, rkey, dma_len, imm)
    good = None
    if src is not None and dst is not None:
        state = IcrcPrefix(src, dst).state(len(view))
        want = crc32(view[HEADER_SIZE:end], crc32(_masked_header(view), state))
        good = want == _ICRC.unpack_from(view, end)[0]
    return fields, payload, good
