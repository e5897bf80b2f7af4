"""Transport side of one SDR QP over UDP: QPNs, rkeys, the key table, the paced send path.

Each (generation, channel) is its own transport QP with a random 24-bit QPN; each
generation has its own random rkey. A packet's generation is the QPN that carried it, and
its RETH virtual address is the remote offset in the receiver's zero-based key space
(slot * max_message_size + offset), which the receiver resolves through its KeyTable.
"""

from __future__ import annotations

import logging
import select
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

from backends.udp.roce import (
    DEFAULT_PKEY,
    HEADER,
    HEADER_SIZE,
    IP_UDP_OVERHEAD,
    UC_RDMA_WRITE_ONLY_IMM,
    IcrcPrefix,
    crc32,
    wire_length,
)
from sdr.config import QPAttr
from sdr.errors import ConfigError, ProtocolError, TransportError
from sdr.key_table import KeyTable
from sdr.pacing import TokenBucket
from sdr.transport import MAX_CONTROL_SIZE, CompletionBatch, MemoryRegion, TransportQP, WriteBatch

if TYPE_CHECKING:
    from backends.udp.transport import UdpTransport

__all__ = ["UdpQP", "CONTROL_HEADER"]

log = logging.getLogger(__name__)

CONTROL_HEADER = struct.Struct("!I")
"""Control datagrams start with the destination QP's 32-bit control id."""
_ICRC = struct.Struct("<I")
_PSN_MASK = 0xFFFFFF
_RESV8_ONES = 0xFF000000
_ZEROS = bytes(4)
_SEND_RETRY_S = 0.01
_BURST_S = 0.0005
_BURST_PACKETS = 8

COUNTER_NAMES = (
    "bad_icrc",
    "bad_rkey",
    "bad_length",
    "late",
    "out_of_range",
    "stale_generation",
    "malformed",
)


class UdpQP(TransportQP):
    """One QP's endpoints on a :class:`UdpTransport` (created by ``create_qp``)."""

    def __init__(self, transport: UdpTransport, attr: QPAttr) -> None:
        self.transport = transport
        self.attr = attr
        self.keys = KeyTable(attr)
        rng = transport.rng
        self.qpns = [
            [transport.new_qpn(self, g, c) for c in range(attr.channels)]
            for g in range(attr.generations)
        ]
        self.rkeys = [int(rng.integers(1, 1 << 32)) for _ in range(attr.generations)]
        self.control_id = transport.new_control_id(self)
        self.peer: tuple[str, int] | None = None
        self.peer_control: tuple[str, int] | None = None
        self.peer_control_id = 0
        self.peer_qpns: list[list[int]] = []
        self.peer_rkeys: list[int] = []
        self._psn = [[0] * attr.channels for _ in range(attr.generations)]
        self._prefix: IcrcPrefix | None = None
        self.packet_bits = (wire_length(attr.mtu) + IP_UDP_OVERHEAD) * 8
        burst = max(_BURST_PACKETS * self.packet_bits, (attr.rate_limit or 0) * _BURST_S)
        self.pacer = TokenBucket(attr.rate_limit, burst)
        self.completions: deque[tuple[int, int, int, int, int]] = deque()
        self.control_in: deque[bytes] = deque()
        self.stats = dict.fromkeys(COUNTER_NAMES, 0)
        self.stats.update(packets_placed=0, bytes_placed=0, wire_packets_sent=0, wire_bytes_sent=0)
        self._hdr = bytearray(HEADER_SIZE)
        self._tail = bytearray(8)
        self._tail_view = memoryview(self._tail)

    # --- connection set-up ----------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        t = self.transport
        return {
            "host": t.host,
            "port": t.port,
            "control_port": t.control_port,
            "control_id": self.control_id,
            "qpns": self.qpns,
            "rkeys": self.rkeys,
        }

    def connect(self, remote: dict[str, Any]) -> None:
        attr = self.attr
        try:
            host, port = str(remote["host"]), int(remote["port"])
            qpns = [[int(q) for q in gen] for gen in remote["qpns"]]
            rkeys = [int(k) for k in remote["rkeys"]]
            control = (host, int(remote["control_port"]))
            control_id = int(remote["control_id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"peer info is not UDP transport info: {exc!r}") from exc
        if len(qpns) != attr.generations or any(len(g) != attr.channels for g in qpns):
            raise ConfigError(
                f"peer has {len(qpns)} generations x {len(qpns[0]) if qpns else 0} channels "
                f"of QPNs; expected {attr.generations} x {attr.channels}"
            )
        if len(rkeys) != attr.generations:
            raise ConfigError(f"peer sent {len(rkeys)} rkeys, expected {attr.generations}")
        self.peer, self.peer_control, self.peer_control_id = (host, port), control, control_id
        self.peer_qpns, self.peer_rkeys = qpns, rkeys
        self._prefix = IcrcPrefix((self.transport.host, self.transport.port), self.peer)

    # --- key table --------------------------------------------------------------------------
    def bind(
        self,
        generation: int,
        slot: int,
        region: MemoryRegion,
        offset: int,
        length: int,
        msg_id: int,
    ) -> None:
        self.keys.bind(generation, slot, region, offset, length, msg_id)

    def unbind(self, generation: int, slot: int) -> None:
        self.keys.unbind(generation, slot)

    # --- send path --------------------------------------------------------------------------
    def send_budget(self, now: float) -> int:
        return self.pacer.budget(now, self.packet_bits)

    def next_send_time(self, now: float) -> float:
        """When the pacer next allows one full packet (``now`` if it already does)."""
        return self.pacer.next_send_time(now, self.packet_bits)

    def post_writes(self, batch: WriteBatch) -> None:
        if self.peer is None or self._prefix is None:
            raise TransportError("QP is not connected")
        gen = batch.generation
        qpns, rkey, psns = self.peer_qpns[gen], self.peer_rkeys[gen], self._psn[gen]
        view, hdr, tail, tail_view = batch.region.view, self._hdr, self._tail, self._tail_view
        state_of, peer, send = self._prefix.state, self.peer, self._send
        pack_into, icrc_pack = HEADER.pack_into, _ICRC.pack_into
        opcode, pkey = UC_RDMA_WRITE_ONLY_IMM, DEFAULT_PKEY
        wire = 0
        for ch, roff, imm, src, n in zip(
            batch.channels.tolist(),
            batch.remote_offsets.tolist(),
            batch.imms.tolist(),
            batch.src_offsets.tolist(),
            batch.lengths.tolist(),
            strict=True,
        ):
            psn = psns[ch]
            psns[ch] = (psn + 1) & _PSN_MASK
            pad = -n & 3
            size = HEADER_SIZE + n + pad + 4
            # the ICRC sees BTH byte 4 as all ones; the wire carries zeros there
            qpn = qpns[ch] | _RESV8_ONES
            pack_into(hdr, 0, opcode, pad << 4, pkey, qpn, psn, roff, rkey, n, imm)
            payload = view[src : src + n]
            crc = crc32(payload, crc32(hdr, state_of(size)))
            hdr[4] = 0
            if pad:
                crc = crc32(_ZEROS[:pad], crc)
                tail[:pad] = _ZEROS[:pad]
            icrc_pack(tail, pad, crc)
            send([hdr, payload, tail_view[: pad + 4]], peer, size)
            wire += size + IP_UDP_OVERHEAD
        self.stats["wire_packets_sent"] += len(batch)
        self.stats["wire_bytes_sent"] += wire
        self.pacer.consume(self.transport.now(), wire * 8)

    def _send(self, buffers: list[Any], address: tuple[str, int], size: int) -> None:
        sock = self.transport.data_socket
        while True:
            try:
                sock.sendmsg(buffers, (), 0, address)
                return
            except BlockingIOError:
                select.select([], [sock], [], _SEND_RETRY_S)  # send queue full: let it drain
            except OSError as exc:
                raise TransportError(f"sending {size} bytes to {address}: {exc}") from exc

    # --- receive side (filled by the transport's pump) --------------------------------------
    def poll_completions(self, max_packets: int) -> CompletionBatch:
        if len(self.completions) < max_packets:
            self.transport.pump(max_packets)
        queue = self.completions
        n = min(max_packets, len(queue))
        if not n:
            return CompletionBatch.empty()
        rows = [queue.popleft() for _ in range(n)]
        return CompletionBatch.from_rows(rows)

    # --- control path -----------------------------------------------------------------------
    def send_control(self, data: bytes) -> None:
        if len(data) > MAX_CONTROL_SIZE:
            raise ProtocolError(f"control message of {len(data)} bytes > {MAX_CONTROL_SIZE}")
        if self.peer_control is None:
            raise TransportError("QP is not connected")
        self.transport.send_control(self.peer_control, self.peer_control_id, bytes(data))

    def poll_control(self) -> list[bytes]:
        self.transport.pump_control()
        out = list(self.control_in)
        self.control_in.clear()
        return out

    def counters(self) -> dict[str, int]:
        """Discards by reason (bad_icrc, bad_rkey, late, ...) and datapath totals."""
        out = dict(self.stats)
        out.update({f"udp_{k}": v for k, v in self.transport.transport_counters().items()})
        return out

    def close(self) -> None:
        self.transport.forget(self)
