"""Transport side of one SDR QP over UDP: QPNs, rkeys, the key table, the paced send path.

Each (generation, channel) is its own transport QP with a random 24-bit QPN; each
generation has its own random rkey. A packet's generation is the QPN that carried it, and
its RETH virtual address is the remote offset in the receiver's zero-based key space
(slot * max_message_size + offset), which the receiver resolves through its KeyTable.
The info a QP publishes and the checks on its peer's are in ``qp_info``; its pacer, which
lets a paced sender go a batch at a time, in ``batch_pacing``.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections import deque
from typing import Any

import numpy as np

from sdr.backends.udp import native
from sdr.backends.udp.batch_pacing import BatchPacer
from sdr.backends.udp.contracts import CONTROL_HEADER, QPN_MAX, QPN_MIN, QPHost
from sdr.backends.udp.mmsg import SendRing, address_of
from sdr.backends.udp.psn import PsnCounters
from sdr.backends.udp.qp_info import INFO_FIELDS, info_of, parse_peer_info
from sdr.backends.udp.qp_info import OPTIONAL_INFO_FIELDS as OPTIONAL_INFO_FIELDS
from sdr.backends.udp.roce import (
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
from sdr.errors import LocalProtocolError, ResourceBusy, TransportError
from sdr.key_table import KeyTable, KeyTableBindings
from sdr.placement import DISCARD_REASONS
from sdr.queue_pair import MAX_QUEUED_CONTROL
from sdr.transport import (
    MAX_CONTROL_SIZE,
    CompletionBatch,
    TransportQP,
    WriteBatch,
    concat_completions,
)

__all__ = ["UdpQP", "CONTROL_HEADER", "INFO_FIELDS", "QPN_MAX", "QPN_MIN"]

log = logging.getLogger(__name__)

_ICRC = struct.Struct("<I")
_RESV8_ONES = 0xFF000000
_ZEROS = bytes(4)
_SEND_BATCH = 256
_GSO_SEGMENTS = 64  # the kernel's UDP_MAX_SEGMENTS
_UDP_PAYLOAD = 65507  # IPv4: 65535 - 20 - 8

_EMPTY = CompletionBatch.empty()


def _rows(batch: CompletionBatch, start: int, stop: int) -> CompletionBatch:
    return CompletionBatch(
        channels=batch.channels[start:stop],
        generations=batch.generations[start:stop],
        imms=batch.imms[start:stop],
        byte_lens=batch.byte_lens[start:stop],
        remote_offsets=batch.remote_offsets[start:stop],
        validated=batch.validated,
        crcs=None if batch.crcs is None else batch.crcs[start:stop],
    )


WIRE_DISCARDS = ("bad_source", "bad_icrc", "bad_rkey", "bad_length", "control_dropped")
"""Drops this backend counts itself (:attr:`UdpQP.discards`); the key table counts the
rest (:data:`sdr.placement.DISCARD_REASONS`)."""
COUNTER_NAMES = WIRE_DISCARDS + DISCARD_REASONS


class UdpQP(KeyTableBindings, TransportQP):
    """One QP's endpoints on a :class:`UdpTransport` (created by ``create_qp``)."""

    def __init__(self, transport: QPHost[UdpQP], attr: QPAttr) -> None:
        self.transport = transport
        self.attr = attr
        self.keys = KeyTable(attr)
        rng = transport.rng
        self.qpns: list[list[int]] = []
        self.control_id = 0  # never drawn: the transport's ids start at 1
        try:
            for g in range(attr.generations):
                self.qpns.append([])
                for c in range(attr.channels):
                    self.qpns[g].append(transport.new_qpn(self, g, c))
            self.rkeys = [int(rng.integers(1, 1 << 32)) for _ in range(attr.generations)]
            self.control_id = transport.new_control_id(self)
        except ResourceBusy:
            transport.forget(self)  # give back the QPNs this QP got before the space ran out
            raise
        self.peer: tuple[str, int] | None = None
        self.peer_control: tuple[str, int] | None = None
        self.peer_control_id = 0
        self.peer_qpns: list[list[int]] = []
        self.peer_rkeys: list[int] = []
        self.psns = PsnCounters(attr.generations, attr.channels)
        self._prefix: IcrcPrefix | None = None
        self._prefixes: list[IcrcPrefix] = []
        self.peer_ports: list[int] = []
        """The peer's data ports, one per path (one unless its transport has ``paths``)."""
        self.packet_bits = (wire_length(attr.mtu) + IP_UDP_OVERHEAD) * 8
        self.pacer = BatchPacer(attr.rate_limit, self.packet_bits)
        self.completions: deque[CompletionBatch] = deque()
        self.pending = 0  # packets in ``completions``
        self.control_in: deque[bytes] = deque()
        """Control messages read for this QP, not yet polled (at most MAX_QUEUED_CONTROL)."""
        self._seen_pump = -1  # the transport's pump round this QP last took completions in
        self._seen_control = -1
        self.discards = dict.fromkeys(WIRE_DISCARDS, 0)
        """Packets this QP's endpoints dropped before placement, by reason (counters()
        adds the key table's discards)."""
        self.stats = dict(
            packets_placed=0,
            bytes_placed=0,
            wire_packets_sent=0,
            wire_bytes_sent=0,
            wire_packets_unsent=0,
            gso_refused=0,
        )
        """Datapath totals: packets and payload bytes placed, packets and IP bytes sent,
        packets posted that the kernel did not take (its send queue stayed full, or a
        send failed part way), sends the kernel refused with GSO (sent again without)."""
        self._ring = SendRing(_SEND_BATCH, HEADER_SIZE, 8)
        self._records = self._ring.headers.view(HEADER_DTYPE).reshape(_SEND_BATCH)
        self._records["opcode"] = UC_RDMA_WRITE_ONLY_IMM
        self._records["pkey"] = DEFAULT_PKEY
        self._header_view = self._ring.headers.data.cast("B")
        self._peer_qpn_array: list[np.ndarray] = []
        self._peer_ip = 0
        self._gso_segments = max(1, min(_GSO_SEGMENTS, _UDP_PAYLOAD // wire_length(attr.mtu)))
        """Packets of one MTU that one GSO send carries (1: GSO cannot help)."""

    # --- connection set-up ----------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return info_of(self.transport, self.control_id, self.qpns, self.rkeys)

    def connect(self, remote: dict[str, Any]) -> None:
        """Connect to the peer's :meth:`info`; every field is validated first (ProtocolError
        or ConfigError naming it), so a refused connect changes nothing."""
        host, port, control, control_id, qpns, rkeys, ports = parse_peer_info(remote, self.attr)
        self.peer, self.peer_control, self.peer_control_id = (host, port), control, control_id
        self.peer_qpns, self.peer_rkeys = qpns, rkeys
        self.peer_ports = ports
        local = (self.transport.host, self.transport.port)
        self._prefixes = [IcrcPrefix(local, (host, p)) for p in ports]
        self._prefix = self._prefixes[0]
        self._peer_qpn_array = [np.asarray(g, dtype=np.int64) for g in qpns]
        self._ring.set_peer(host, port)
        self._peer_ip = int.from_bytes(socket.inet_aton(host), "big")
        self.transport.endpoints_changed(self)  # the receive path learns the peer's address

    # --- send path --------------------------------------------------------------------------
    def set_pacing_rate(self, now: float, bits_per_s: float) -> None:
        self.pacer.set_pacing_rate(now, bits_per_s)

    def send_budget(self, now: float) -> int:
        return self.pacer.batch_budget(now)

    def send_budget_now(self, now: float) -> int:
        return self.pacer.budget(now, self.pacer.packet_bits)

    def next_send_time(self, now: float) -> float:
        """When the pacer next allows a batch of packets (``now`` if it already does)."""
        return self.pacer.next_batch_time(now)

    def post_writes(self, batch: WriteBatch) -> None:
        if self.peer is None or self._prefix is None:
            raise TransportError("QP is not connected")
        if not 0 <= batch.generation < len(self.peer_qpns):
            raise LocalProtocolError(
                f"generation {batch.generation} has no QPN at the peer "
                f"({len(self.peer_qpns)} generations)"
            )
        packets = wire = 0
        error: OSError | None = None
        for path, part in self._by_path(batch):
            if native.active():
                sent, part_wire, error = self._send_native(part, path)
            else:
                sent, part_wire = len(part), self._send_python(part, path)
            packets += sent
            wire += part_wire
            if sent < len(part):
                break  # the socket took no more: the next part would wait again
        # only what left is counted (and paced, and has a PSN); the core counts every
        # posted packet as departed, so one that did not leave is, to it, one lost on the
        # wire, which its reliability layer repairs like any other loss
        self.stats["wire_packets_sent"] += packets
        self.stats["wire_bytes_sent"] += wire
        self.stats["wire_packets_unsent"] += len(batch) - packets
        self.pacer.consume(self.transport.now(), wire * 8)
        if error is not None:
            raise TransportError(f"sendmmsg: {error}") from error

    def _by_path(self, batch: WriteBatch) -> list[tuple[int, WriteBatch]]:
        """The batch split by the peer port its channels go to (channel c: port c % n)."""
        n = len(self.peer_ports)
        if n == 1:
            return [(0, batch)]
        paths = batch.channels.astype(np.int64) % n
        parts = []
        for path in np.unique(paths).tolist():
            take = paths == path
            parts.append((path, _subset(batch, take)))
        return parts

    def _send_python(self, batch: WriteBatch, path: int) -> int:
        """The reference send: headers and ICRCs in Python, sendmmsg through ctypes."""
        ring, cap = self._ring, self._ring.capacity
        ring.set_peer(self.peer[0], self.peer_ports[path])  # type: ignore[index]
        base = address_of(batch.region.view)
        wire = 0
        for start in range(0, len(batch), cap):
            stop = min(len(batch), start + cap)
            wire += self._post_slice(batch, start, stop, base, self._prefixes[path])
            ring.send(self.transport.data_socket, stop - start)
        return wire

    def _send_native(self, batch: WriteBatch, path: int = 0) -> tuple[int, int, OSError | None]:
        """Headers, ICRCs and sendmmsg (with GSO where the transport has it) in one native
        pass (backends/udp/_datapath.c): (packets sent, their IP bytes, the error that
        stopped the send, None when none did or the send queue merely stayed full for
        the native wait bound). Packets that did not leave are a suffix of the batch:
        their PSNs are handed back, so the next packets take them."""
        t, gen = self.transport, batch.generation
        channels = batch.channels.astype(np.intp)
        segments = self._gso_segments if t.gso and len(batch) > 1 else 1
        try:
            result = native.module.send(  # type: ignore[union-attr]
                t.data_socket.fileno(),
                batch.region.view,
                peer=(self._peer_ip, self.peer_ports[path]),
                local=(t.local_ip, t.port),
                rkey=self.peer_rkeys[gen],
                src_offsets=batch.src_offsets.astype(np.int64, copy=False),
                lengths=batch.lengths.astype(np.int64, copy=False),
                remote_offsets=batch.remote_offsets.astype(np.int64, copy=False),
                imms=batch.imms.astype(np.int64),
                qpns=self._peer_qpn_array[gen][channels],
                psns=self.psns.take(gen, channels),
                gso_segments=segments,
            )
        except ValueError as exc:
            raise LocalProtocolError(str(exc)) from exc
        sent = int(result.packets)
        if result.gso_refused:  # e.g. UDP checksums off (EINVAL), no checksum offload (EIO)
            t.gso = False  # this socket is sent on without GSO from now on
            self.stats["gso_refused"] += 1
            log.info("the kernel refused UDP GSO on the data socket: sending without it")
        if sent < len(batch):
            self.psns.give_back(gen, channels[sent:])
        error = None
        if result.error and result.error not in native.WOULD_BLOCK:
            error = OSError(result.error, os.strerror(result.error))
        return sent, int(result.wire_bytes), error

    def _post_slice(
        self, batch: WriteBatch, start: int, stop: int, base: int, prefix: IcrcPrefix
    ) -> int:
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
        hdr["psn"] = self.psns.take(gen, channels)
        hdr["va"] = batch.remote_offsets[start:stop]
        hdr["rkey"] = self.peer_rkeys[gen]
        hdr["dlen"] = lengths
        hdr["imm"] = batch.imms[start:stop]
        sizes = HEADER_SIZE + lengths + pads + ICRC_SIZE
        state, hv, view = prefix.state, self._header_view, batch.region.view
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

    # --- receive side (filled by the transport's pump) --------------------------------------
    def deliver(self, batch: CompletionBatch) -> None:
        """The receive path placed these packets for this QP (counted, queued for polling)."""
        self.completions.append(batch)
        self.pending += len(batch)
        self.stats["packets_placed"] += len(batch)
        self.stats["bytes_placed"] += int(batch.byte_lens.sum())

    def poll_completions(self, max_packets: int) -> CompletionBatch:
        t = self.transport
        # the data socket is shared: when another QP emptied it since this one last looked,
        # what it read for this QP is queued already, so an idle round over many QPs
        # costs one receive call, not one per QP
        if self.pending < max_packets and (self._seen_pump == t.pump_round or not t.drained):
            t.pump(max_packets - self.pending)
        self._seen_pump = t.pump_round
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
            return _EMPTY
        if len(parts) == 1:
            return parts[0]
        return concat_completions(parts)

    # --- control path -----------------------------------------------------------------------
    def send_control(self, data: bytes) -> None:
        if len(data) > MAX_CONTROL_SIZE:
            raise LocalProtocolError(f"control message of {len(data)} bytes > {MAX_CONTROL_SIZE}")
        if self.peer_control is None:
            raise TransportError("QP is not connected")
        self.transport.send_control(self.peer_control, self.peer_control_id, bytes(data))

    def queue_control(self, data: bytes) -> None:
        """Queue a control message read for this QP (the transport's pump): at most
        MAX_QUEUED_CONTROL wait; beyond, the newest are dropped (``control_dropped``)."""
        if len(self.control_in) >= MAX_QUEUED_CONTROL:
            self.discards["control_dropped"] += 1
        else:
            self.control_in.append(data)

    def poll_control(self) -> list[bytes]:
        t = self.transport
        if self._seen_control == t.control_round or not t.control_drained:
            t.pump_control()
        self._seen_control = t.control_round
        out = list(self.control_in)
        self.control_in.clear()
        return out

    def counters(self) -> dict[str, int]:
        """Discards by reason (bad_icrc, bad_rkey, late, ...); udp_* are transport-wide."""
        out = {**self.discards, **self.keys.discards()}
        out.update({f"udp_{k}": v for k, v in self.transport.transport_counters().items()})
        return out

    def close(self) -> None:
        self.transport.forget(self)


def _subset(batch: WriteBatch, take: np.ndarray) -> WriteBatch:
    return WriteBatch(
        region=batch.region,
        generation=batch.generation,
        channels=batch.channels[take],
        remote_offsets=batch.remote_offsets[take],
        imms=batch.imms[take],
        src_offsets=batch.src_offsets[take],
        lengths=batch.lengths[take],
    )
