"""Transport side of one SDR QP over UDP: QPNs, rkeys, the key table, the paced send path.

Each (generation, channel) is its own transport QP with a random 24-bit QPN; each
generation has its own random rkey. A packet's generation is the QPN that carried it, and
its RETH virtual address is the remote offset in the receiver's zero-based key space
(slot * max_message_size + offset), which the receiver resolves through its KeyTable.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.udp.mmsg import SendRing, address_of
from backends.udp.roce import (
    DEFAULT_PKEY,
    HEADER_DTYPE,
    HEADER_SIZE,
    ICRC_SIZE,
    IP_UDP_OVERHEAD,
    UC_RDMA_WRITE_ONLY_IMM,
    IcrcPrefix,
    crc32,
    wire_length,
)
from sdr.config import QPAttr
from sdr.errors import ConfigError, ProtocolError, TransportError
from sdr.key_table import KeyTable, KeyTableBindings
from sdr.pacing import TokenBucket
from sdr.transport import MAX_CONTROL_SIZE, CompletionBatch, TransportQP, WriteBatch

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
_SEND_BATCH = 256
_BURST_S = 0.002
_BURST_PACKETS = 16  # the largest burst a small-BDP queue must absorb is max(16 packets, 2 ms)
_WAKE_PACKETS = 64
_BATCH_S = 0.001

_COMPLETION_FIELDS = ("channels", "generations", "imms", "byte_lens", "remote_offsets")


def _rows(batch: CompletionBatch, start: int, stop: int) -> CompletionBatch:
    return CompletionBatch(*(getattr(batch, f)[start:stop] for f in _COMPLETION_FIELDS))


COUNTER_NAMES = (
    "bad_icrc",
    "bad_rkey",
    "bad_length",
    "late",
    "out_of_range",
    "stale_generation",
    "malformed",
    "duplicates",
)


class UdpQP(KeyTableBindings, TransportQP):
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
        # a paced sender sends in batches, not packet by packet: it waits until a batch
        # (up to _WAKE_PACKETS, at most _BATCH_S of the rate) is allowed, so the fixed
        # cost of a progress round is shared by many packets
        batch_bits = _WAKE_PACKETS * self.packet_bits
        if attr.rate_limit is not None:
            batch_bits = min(batch_bits, max(self.packet_bits, attr.rate_limit * _BATCH_S))
        self._wake_bits = min(burst, batch_bits)
        self._min_batch = max(1, int(self._wake_bits // self.packet_bits))
        self.completions: deque[CompletionBatch] = deque()
        self.pending = 0  # packets in ``completions``
        self.control_in: deque[bytes] = deque()
        self.discards = dict.fromkeys(COUNTER_NAMES, 0)
        """Packets dropped by this QP's endpoints, by reason (what counters() reports)."""
        self.stats = dict(packets_placed=0, bytes_placed=0, wire_packets_sent=0, wire_bytes_sent=0)
        """Datapath totals: packets and payload bytes placed, packets and IP bytes sent."""
        self._ring = SendRing(_SEND_BATCH, HEADER_SIZE, 8)
        self._records = self._ring.headers.view(HEADER_DTYPE).reshape(_SEND_BATCH)
        self._records["opcode"] = UC_RDMA_WRITE_ONLY_IMM
        self._records["pkey"] = DEFAULT_PKEY
        self._header_view = memoryview(self._ring.headers).cast("B")
        self._peer_qpn_array: list[np.ndarray] = []

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
        self._peer_qpn_array = [np.asarray(g, dtype=np.int64) for g in qpns]
        self._ring.set_peer(host, port)

    # --- key table --------------------------------------------------------------------------

    # --- send path --------------------------------------------------------------------------
    def send_budget(self, now: float) -> int:
        budget = self.pacer.budget(now, self.packet_bits)
        return budget if budget >= self._min_batch else 0

    def next_send_time(self, now: float) -> float:
        """When the pacer next allows a batch of packets (``now`` if it already does)."""
        return self.pacer.next_send_time(now, self._wake_bits)

    def post_writes(self, batch: WriteBatch) -> None:
        if self.peer is None or self._prefix is None:
            raise TransportError("QP is not connected")
        if not 0 <= batch.generation < len(self.peer_qpns):
            raise ProtocolError(
                f"generation {batch.generation} has no QPN at the peer "
                f"({len(self.peer_qpns)} generations)"
            )
        ring, cap = self._ring, self._ring.capacity
        base = address_of(batch.region.view)
        wire = 0
        for start in range(0, len(batch), cap):
            stop = min(len(batch), start + cap)
            wire += self._post_slice(batch, start, stop, base)
            ring.send(self.transport.data_socket, stop - start)
        self.stats["wire_packets_sent"] += len(batch)
        self.stats["wire_bytes_sent"] += wire
        self.pacer.consume(self.transport.now(), wire * 8)

    def _post_slice(self, batch: WriteBatch, start: int, stop: int, base: int) -> int:
        """Fill the ring's descriptors for packets [start, stop); returns their IP bytes."""
        ring, k, gen = self._ring, stop - start, batch.generation
        channels = batch.channels[start:stop].astype(np.intp)
        lengths = batch.lengths[start:stop].astype(np.int64)
        src = batch.src_offsets[start:stop].astype(np.int64)
        pads = -lengths & 3
        hdr = self._records[:k]
        hdr["flags"] = pads << 4
        # the ICRC sees BTH byte 4 (F|B|resv6) as all ones; the wire carries zeros there
        hdr["qpn"] = self._peer_qpn_array[gen][channels] | _RESV8_ONES
        hdr["psn"] = self._next_psns(gen, channels)
        hdr["va"] = batch.remote_offsets[start:stop]
        hdr["rkey"] = self.peer_rkeys[gen]
        hdr["dlen"] = lengths
        hdr["imm"] = batch.imms[start:stop]
        sizes = HEADER_SIZE + lengths + pads + ICRC_SIZE
        state, hv, view = self._prefix.state, self._header_view, batch.region.view  # type: ignore[union-attr]
        crcs = [
            crc32(view[s : s + n], crc32(hv[o : o + HEADER_SIZE], state(size)))
            for o, s, n, size in zip(
                range(0, k * HEADER_SIZE, HEADER_SIZE),
                src.tolist(),
                lengths.tolist(),
                sizes.tolist(),
                strict=True,
            )
        ]
        ring.headers[:k, 4] = 0
        tails = ring.tails[:k]
        tails[:] = 0
        tails[:, :ICRC_SIZE] = np.asarray(crcs, dtype="<u4").view(np.uint8).reshape(k, ICRC_SIZE)
        for i in np.flatnonzero(pads).tolist():  # rare: a message tail not a multiple of 4
            pad = int(pads[i])
            crc = crc32(_ZEROS[:pad], crcs[i])
            tails[i] = 0
            tails[i, pad : pad + ICRC_SIZE] = np.frombuffer(_ICRC.pack(crc), dtype=np.uint8)
        ring.iov[:k, 1, 0] = base + src
        ring.iov[:k, 1, 1] = lengths
        ring.iov[:k, 2, 1] = pads + ICRC_SIZE
        return int(sizes.sum()) + k * IP_UDP_OVERHEAD

    def _next_psns(self, gen: int, channels: np.ndarray) -> np.ndarray:
        """Per-channel packet sequence numbers for these packets, advancing the counters."""
        psns, k = self._psn[gen], len(channels)
        if self.attr.channels == 1:
            out = (psns[0] + np.arange(k, dtype=np.int64)) & _PSN_MASK
            psns[0] = (psns[0] + k) & _PSN_MASK
            return out
        out = np.empty(k, dtype=np.int64)
        for ch in range(self.attr.channels):
            rows = np.flatnonzero(channels == ch)
            out[rows] = (psns[ch] + np.arange(len(rows), dtype=np.int64)) & _PSN_MASK
            psns[ch] = (psns[ch] + len(rows)) & _PSN_MASK
        return out

    # --- receive side (filled by the transport's pump) --------------------------------------
    def poll_completions(self, max_packets: int) -> CompletionBatch:
        if self.pending < max_packets:
            self.transport.pump(max_packets - self.pending)
        queue, parts, taken = self.completions, [], 0
        while queue and taken < max_packets:
            batch = queue.popleft()
            room = max_packets - taken
            if len(batch) > room:  # split: the rest stays queued
                queue.appendleft(_rows(batch, room, len(batch)))
                batch = _rows(batch, 0, room)
            parts.append(batch)
            taken += len(batch)
        self.pending -= taken
        if not parts:
            return CompletionBatch.empty()
        if len(parts) == 1:
            return parts[0]
        return CompletionBatch(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in _COMPLETION_FIELDS)
        )

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
        """Discards by reason (bad_icrc, bad_rkey, late, ...); udp_* are transport-wide."""
        out = dict(self.discards)
        out.update({f"udp_{k}": v for k, v in self.transport.transport_counters().items()})
        return out

    def close(self) -> None:
        self.transport.forget(self)
