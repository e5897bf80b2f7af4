"""RoCEv2 as the offload engine's wire, through the UDP backend's codec.

With ``OffloadTransport(wire="roce")`` every packet is an InfiniBand UC "RDMA WRITE Only
with Immediate" in UDP, exactly as the ``udp`` backend (and a RoCEv2 NIC) puts it on the
wire; this module only adapts :mod:`sdr.backends.udp.roce` (encode, decode, ICRC) to the
engine: a decoding source that maps the destination QPN to its generation and hands the
engine ``(generation, imm, remote_offset, payload)``, and a sender that encodes.

QPNs: the receiving QP numbers its ``generations x channels`` endpoints
``qpn_base + generation * channels + channel`` and announces them in its info.
"""

from __future__ import annotations

import socket
from typing import Any

from sdr.backends.offload.wire import MALFORMED, STAGING_SLOTS, StagingRing, register_source
from sdr.backends.udp.roce import decode_packet, encode_packet
from sdr.errors import TransportError

__all__ = ["RoceSender", "RoceSource", "qpn_of"]

_QPN_SPAN = 1 << 12  # 16 generations x 256 channels


def qpn_of(qp_id: int, generation: int, channel: int, channels: int) -> int:
    """The QPN of one endpoint of a QP (24 bits, never 0 or 1: those are special in IB)."""
    base = ((qp_id % ((1 << 24) // _QPN_SPAN - 1)) + 1) * _QPN_SPAN
    return base + generation * channels + channel


class RoceSource:
    """A UDP socket receiving RoCEv2 UC write-with-immediate packets for one channel."""

    decoded = True

    def __init__(self, host: str, qpns: dict[int, int], check_icrc: bool = True) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
            self.sock.bind((host, 0))
        except OSError as exc:
            self.sock.close()
            raise TransportError(f"cannot bind a RoCE socket on {host!r}: {exc}") from exc
        self.sock.setblocking(False)
        self.local = self.sock.getsockname()
        self.qpns = {int(q): int(g) for q, g in qpns.items()}
        self.check_icrc = check_icrc
        self._staging = StagingRing()
        self.staging_slots = STAGING_SLOTS

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv(self) -> Any:
        buffer = self._staging.next_buffer()
        try:
            n, src = self.sock.recvfrom_into(buffer)
        except (BlockingIOError, InterruptedError):
            return None
        try:
            dst = self.local if self.check_icrc else None
            fields, payload, good = decode_packet(buffer[:n], src, dst)
        except ValueError:
            return MALFORMED
        generation = self.qpns.get(fields.dest_qpn)
        if good is False or generation is None:
            return MALFORMED
        return generation, fields.imm, fields.va, payload

    def address(self) -> Any:
        return list(self.local)

    def close(self) -> None:
        self.sock.close()


class RoceSender:
    """Encodes SDR packets as RoCEv2 UC writes towards a peer's channel sockets."""

    def __init__(self, sock: socket.socket, peers: list[tuple[str, int]], qpns: list[list[int]]):
        self.sock = sock
        self.peers = peers
        self.qpns = qpns  # [generation][channel]
        self.src = sock.getsockname()
        self._psn = [[0] * len(peers) for _ in qpns]

    def send(self, generation: int, channel: int, imm: int, remote: int, payload: Any) -> None:
        """One packet; PSNs count per endpoint, as a UC requester's do."""
        dst = self.peers[channel]
        if generation >= len(self.qpns):  # not an endpoint of the peer: numbered as if it were
            qpn, psn = self.qpns[0][channel] + generation * len(self.peers), 0
        else:
            psn = self._psn[generation][channel]
            self._psn[generation][channel] = (psn + 1) & 0xFFFFFF
            qpn = self.qpns[generation][channel]
        self.sock.sendto(encode_packet(self.src, dst, qpn, psn, remote, 0, imm, payload), dst)


register_source("roce", RoceSource)
