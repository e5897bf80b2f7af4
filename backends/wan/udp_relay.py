"""The no-root mode: a UDP relay on loopback standing in the middle of the link.

Each endpoint talks to the relay as if it were the peer (like a NAT): for every UDP port
the peer listens on, the relay listens on a stand-in port and forwards to the real one,
sending from the stand-in of the other side, so replies come back through the relay.

RoCEv2's ICRC covers the IP addresses and UDP ports, which a NAT changes. With
``reseal=True`` the relay acts as a RoCE-aware middlebox: it checks each RoCE packet's
ICRC for the addresses it arrived with (dropping and counting bad ones) and recomputes it
for the addresses it leaves with, *before* the link may corrupt it, so corruption on the
emulated link is still caught by the receiver.
"""

from __future__ import annotations

import socket
import struct

from sdr.backends.udp.roce import HEADER_SIZE, ICRC_SIZE, UC_RDMA_WRITE_ONLY_IMM, IcrcPrefix, crc32

__all__ = ["RelayEnd", "relay_pairs", "icrc_for"]

Address = tuple[str, int]
_ICRC = struct.Struct("<I")


def icrc_for(packet: bytes | bytearray, src: Address, dst: Address) -> int:
    """The ICRC a RoCEv2 datagram must carry when it travels from ``src`` to ``dst``."""
    masked = bytes(packet[:4]) + b"\xff" + bytes(packet[5:HEADER_SIZE])
    state = IcrcPrefix(src, dst).state(len(packet))
    return crc32(packet[HEADER_SIZE:-ICRC_SIZE], crc32(masked, state))


class RelayEnd:
    """One stand-in socket: receives from an endpoint, sends to ``target`` (the other)."""

    def __init__(self, listen: Address, target: Address, reseal: bool = False) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, 32 << 20)
        self.sock.bind(listen)
        self.sock.setblocking(False)
        self.address: Address = self.sock.getsockname()
        self.target = target
        self.reseal = reseal
        self.peer: RelayEnd | None = None  # packets read here leave through the peer end
        self.bad_icrc = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def read_many(self, limit: int) -> list[bytes]:
        out = []
        for _ in range(limit):
            try:
                packet, sender = self.sock.recvfrom(65536)
            except BlockingIOError:
                break
            if self.reseal and self.peer is not None:
                resealed = self._reseal(packet, sender)
                if resealed is None:
                    continue
                packet = resealed
            out.append(packet)
        return out

    def _reseal(self, packet: bytes, sender: Address) -> bytes | None:
        if len(packet) < HEADER_SIZE + ICRC_SIZE or packet[0] != UC_RDMA_WRITE_ONLY_IMM:
            return packet  # not RoCE (control messages): forwarded unchanged
        if icrc_for(packet, sender, self.address) != _ICRC.unpack_from(packet, len(packet) - 4)[0]:
            self.bad_icrc += 1
            return None
        assert self.peer is not None
        icrc = icrc_for(packet, self.peer.address, self.peer.target)
        return packet[:-ICRC_SIZE] + _ICRC.pack(icrc)

    def write(self, packet: bytes) -> None:
        try:
            self.sock.sendto(packet, self.target)
        except OSError:
            pass  # full or unreachable: lost, as on a wire

    def close(self) -> None:
        self.sock.close()


def relay_pairs(
    a_ports: list[Address], b_ports: list[Address], host: str = "127.0.0.1", reseal: bool = False
) -> list[tuple[RelayEnd, RelayEnd]]:
    """Stand-ins for every port of A and B. Pair i joins A's i-th and B's i-th port.

    A sends to ``pairs[i][0].address`` instead of B's i-th port (it stands in for B and
    delivers B's packets to A); B sends to ``pairs[i][1].address`` instead of A's.
    """
    if len(a_ports) != len(b_ports):
        raise ValueError("both sides need the same number of ports")
    pairs = []
    for a_real, b_real in zip(a_ports, b_ports, strict=True):
        facing_a = RelayEnd((host, 0), target=a_real, reseal=reseal)
        facing_b = RelayEnd((host, 0), target=b_real, reseal=reseal)
        facing_a.peer, facing_b.peer = facing_b, facing_a
        pairs.append((facing_a, facing_b))
    return pairs
