"""What a virtio device does with the packets of a TUN device with offloads: the reference
the native forwarder's GSO path is tested and fuzzed against (written from the virtio
spec and RFC 791/793/768/8200/1071, independently of ``_forward.c``: checksums are
computed from scratch over zeroed fields, not finished from a partial sum).

    frame = gso_frame(False, 17, payload, 1000)   # virtio header + a UDP GSO packet
    wire_packets(frame)                           # the datagrams a device sends for it
"""

from __future__ import annotations

import struct

__all__ = [
    "GSO_TCPV4",
    "GSO_TCPV6",
    "GSO_UDP_L4",
    "NEEDS_CSUM",
    "VNET",
    "checksum_ok",
    "finish_checksum",
    "gso_frame",
    "ip_packet",
    "ones_sum",
    "pseudo_header",
    "wire_packets",
]

VNET = struct.Struct("=BBHHHH")  # flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
NEEDS_CSUM, GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4 = 1, 1, 4, 5
SRC4, DST4 = bytes([10, 200, 0, 1]), bytes([10, 200, 0, 2])
SRC6, DST6 = bytes(range(16)), bytes(range(16, 32))


def ones_sum(data: bytes) -> int:
    """RFC 1071: the ones' complement sum of 16-bit big-endian words, folded."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def pseudo_header(ip: bytes, v6: bool, proto: int, l4len: int) -> bytes:
    """The pseudo-header the L4 checksum covers (addresses, protocol, L4 length)."""
    if v6:
        return ip[8:40] + struct.pack("!IxxxB", l4len, proto)
    return ip[12:20] + struct.pack("!xBH", proto, l4len)


def ip_packet(
    v6: bool,
    proto: int,
    payload: bytes,
    seq: int = 1000,
    flags: int = 0x18,
    options: bytes = b"",
    ident: int = 7,
) -> tuple[bytes, int, int]:
    """A packet as the kernel hands a device that checksums: lengths of the whole, the L4
    checksum field holding the pseudo-header sum (partial). Returns the packet, its L4
    offset and its header length."""
    if proto == 6:
        l4 = struct.pack("!HHIIBBHHH", 4000, 5001, seq, 99, (5 + len(options) // 4) << 4,
                         flags, 512, 0, 0) + options  # fmt: skip
    else:
        l4 = struct.pack("!HHHH", 4000, 5001, 8 + len(payload), 0)
    l4len = len(l4) + len(payload)
    if v6:
        ip = struct.pack("!IHBB16s16s", 6 << 28, l4len, proto, 64, SRC6, DST6)
    else:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + l4len, ident, 0x4000, 64, proto, 0,
                         SRC4, DST4)  # fmt: skip
        ip = ip[:10] + struct.pack("!H", 0xFFFF - ones_sum(ip)) + ip[12:]
    at = 16 if proto == 6 else 6
    l4 = l4[:at] + struct.pack("!H", ones_sum(pseudo_header(ip, v6, proto, l4len))) + l4[at + 2 :]
    return ip + l4 + payload, len(ip), len(ip) + len(l4)


def gso_frame(v6: bool, proto: int, payload: bytes, gso: int, **kw: int | bytes) -> bytes:
    """A virtio header (NEEDS_CSUM, the GSO type of the packet) and the packet."""
    pkt, l4, hdr = ip_packet(v6, proto, payload, **kw)  # type: ignore[arg-type]
    kind = GSO_UDP_L4 if proto == 17 else (GSO_TCPV6 if v6 else GSO_TCPV4)
    return VNET.pack(NEEDS_CSUM, kind, hdr, gso, l4, 16 if proto == 6 else 6) + pkt


def finish_checksum(pkt: bytes, l4: int, at: int) -> bytes:
    """The L4 checksum computed over a zeroed field (not from the partial sum)."""
    v6 = pkt[0] >> 4 == 6
    proto = pkt[6] if v6 else pkt[9]
    body = pkt[l4 : l4 + at] + b"\0\0" + pkt[l4 + at + 2 :]
    c = 0xFFFF - ones_sum(pseudo_header(pkt, v6, proto, len(pkt) - l4) + body)
    return pkt[: l4 + at] + struct.pack("!H", c or 0xFFFF) + pkt[l4 + at + 2 :]


def wire_packets(frame: bytes) -> list[bytes]:
    """The wire packets a virtio device sends for one frame (header + packet)."""
    flags, kind, _, gso, start, offset = VNET.unpack_from(frame)
    pkt = frame[VNET.size :]
    if not kind:
        return [finish_checksum(pkt, start, offset) if flags & NEEDS_CSUM else pkt]
    v6 = pkt[0] >> 4 == 6
    l4 = 40 if v6 else (pkt[0] & 15) * 4
    tcp = kind != GSO_UDP_L4
    hdr = l4 + ((pkt[l4 + 12] >> 4) * 4 if tcp else 8)
    body = pkt[hdr:]
    chunks = [body[i : i + gso] for i in range(0, len(body), gso)]
    out = []
    for k, chunk in enumerate(chunks):
        h = bytearray(pkt[:hdr])
        l4len = hdr - l4 + len(chunk)
        if v6:
            struct.pack_into("!H", h, 4, l4len)
        else:
            struct.pack_into(
                "!HH", h, 2, hdr + len(chunk), (struct.unpack_from("!H", h, 4)[0] + k) & 0xFFFF
            )
            struct.pack_into("!H", h, 10, 0)
            struct.pack_into("!H", h, 10, 0xFFFF - ones_sum(bytes(h[:l4])))
        if tcp:
            struct.pack_into(
                "!I", h, l4 + 4, (struct.unpack_from("!I", h, l4 + 4)[0] + k * gso) % 2**32
            )
            if k + 1 < len(chunks):
                h[l4 + 13] &= ~0x09  # FIN, PSH: the last only
            if k:
                h[l4 + 13] &= ~0x80  # CWR: the first only
        else:
            struct.pack_into("!H", h, l4 + 4, l4len)
        out.append(finish_checksum(bytes(h) + chunk, l4, 16 if tcp else 6))
    return out


def checksum_ok(pkt: bytes) -> bool:
    """Whether the L4 checksum of an IPv4/IPv6 TCP or UDP packet verifies."""
    v6 = pkt[0] >> 4 == 6
    l4 = 40 if v6 else (pkt[0] & 15) * 4
    proto = pkt[6] if v6 else pkt[9]
    return ones_sum(pseudo_header(pkt, v6, proto, len(pkt) - l4) + pkt[l4:]) == 0xFFFF
