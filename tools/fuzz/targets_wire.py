"""Fuzz targets for the wire: the RoCEv2 codec and the UDP backend's receive datapath.

``udp_receive`` feeds whole batches of datagrams through the real receive path
(:class:`sdr.backends.udp.receive.Receiver`) of a QP whose key table binds three receive
buffers inside one registered region. Everything else in that region is a guard band
filled with a pattern; after every batch the guard bands must be untouched and every
completion must name a bound buffer. Datagrams are built from the fuzz input so that the
fuzzer reaches the deep checks: each datagram may take a valid QPN, rkey, ICRC and source
address (chosen by flag bits) or raw fuzzed values for them.
"""

from __future__ import annotations

import socket
import struct

import numpy as np
from registry import Reader, target

from sdr.backends.udp.roce import (
    HEADER_SIZE,
    ICRC_SIZE,
    UC_RDMA_WRITE_ONLY_IMM,
    decode_packet,
    encode_packet,
)

__all__ = [
    "fuzz_roce_decode",
    "fuzz_udp_receive",
    "fuzz_udp_native_receive",
    "fuzz_offload_header",
]

_SRC = ("127.0.0.1", 40000)
_DST = ("127.0.0.1", 4791)


@target("roce_decode")
def fuzz_roce_decode(data: bytes) -> None:
    """decode_packet on raw bytes; a packet that decodes re-encodes to the same bytes."""
    try:
        fields, payload, good = decode_packet(data, _SRC, _DST)
    except ValueError:
        return
    assert fields.opcode == UC_RDMA_WRITE_ONLY_IMM
    assert len(payload) <= len(data) - HEADER_SIZE - ICRC_SIZE
    consistent = (
        fields.dma_len == len(payload)
        and fields.pad == -len(payload) & 3
        and len(data) == HEADER_SIZE + len(payload) + fields.pad + ICRC_SIZE
        and data[1] == fields.pad << 4  # SE, M and TVer zero
        and fields.pkey == 0xFFFF
        and data[4] == 0  # resv8 before the QPN
        and data[8] == 0  # A bit and resv7 before the PSN
        and data[HEADER_SIZE + len(payload) : len(data) - ICRC_SIZE] == b"\0" * fields.pad
    )
    again = encode_packet(
        _SRC, _DST, fields.dest_qpn, fields.psn, fields.va, fields.rkey, fields.imm, payload
    )
    if consistent:
        assert again[:-ICRC_SIZE] == bytes(data[:-ICRC_SIZE])
        assert good == (again == bytes(data))
    fields2, payload2, good2 = decode_packet(again, _SRC, _DST)
    assert good2 and fields2.dest_qpn == fields.dest_qpn and fields2.va == fields.va
    assert bytes(payload2) == bytes(payload)


@target("offload_header")
def fuzz_offload_header(data: bytes) -> None:
    """The offload wire's packet header: parsed fields re-encode to the same header."""
    from sdr.backends.offload.wire import HEADER, encode_header, parse_header

    fields = parse_header(memoryview(data))
    if fields is None:
        return
    again = encode_header(*fields)
    assert again[:6] == data[:6] and again[8:] == data[8 : HEADER.size]  # reserved: 6..8


# --- the receive datapath -------------------------------------------------------------------

_GUARD = 0xA5
_REGION = 4096
# (generation, slot, region offset, length, message id) of the posted receives
_BINDINGS = ((0, 0, 256, 1000, 0), (1, 2, 1536, 700, 2), (2, 1, 2560, 1024, 5))
_PEER = ("127.0.0.1", 45000)
_STRANGER = ("127.0.0.9", 45000)


class _ReceiveRig:
    """One UDP transport, one QP connected to a fake peer, three bound receives."""

    def __init__(self) -> None:
        import sdr
        from sdr.backends.udp import UdpTransport
        from sdr.transport import Bind

        self.attr = sdr.QPAttr(
            mtu=256, chunk_size=512, max_message_size=1024, max_messages=4, generations=3
        )
        self.transport = UdpTransport(port=0, prefault=False, seed=7)
        self.qp = self.transport.create_qp(self.attr)
        qpns = [[q + 1 for q in gen] for gen in self.qp.qpns]  # the peer's own QPNs: unused
        self.qp.connect(
            {"host": _PEER[0], "port": _PEER[1], "control_port": 1, "control_id": 1,
             "qpns": qpns, "rkeys": [1] * self.attr.generations}
        )  # fmt: skip
        self.memory = bytearray([_GUARD]) * _REGION
        self.region = self.transport.register(self.memory)
        self.guard = np.ones(_REGION, dtype=bool)
        self.bounds: dict[tuple[int, int], tuple[int, int]] = {}
        for gen, slot, offset, length, msg_id in _BINDINGS:
            binding = Bind(
                generation=gen,
                slot=slot,
                region=self.region,
                offset=offset,
                length=length,
                msg_id=msg_id,
            )
            self.qp.bind(binding)
            self.guard[offset : offset + length] = False
            self.bounds[(gen, slot)] = (offset, length)
        self.endpoints = [(gen, qpn) for gen, row in enumerate(self.qp.qpns) for qpn in row]
        self.local = (self.transport.host, self.transport.port)
        self.receiver = self.transport._receiver
        self.ring = self.receiver.ring
        self.mem = np.frombuffer(self.memory, dtype=np.uint8)

    def load(self, i: int, packet: bytes, source: tuple[str, int]) -> None:
        """Put one datagram into staging slot ``i`` as recvmmsg would."""
        ring = self.ring
        ring.slots[i, : len(packet)] = np.frombuffer(packet, dtype=np.uint8)
        ring.msgs[i, 6] = 0
        ring.msgs[i, 7] = len(packet)
        name = ring.names[i]
        name[:] = 0
        name[0:2] = (socket.AF_INET, 0)
        name[2:4] = np.frombuffer(struct.pack("!H", source[1]), dtype=np.uint8)
        name[4:8] = np.frombuffer(socket.inet_aton(source[0]), dtype=np.uint8)

    def check(self, from_peer: bool) -> None:
        """Guard bands untouched; every completion lies inside the buffer it names; nothing
        is placed when no datagram came from the peer's address."""
        assert (self.mem[self.guard] == _GUARD).all(), "write outside a posted buffer"
        assert from_peer or not self.qp.completions, "a stranger's packet was placed"
        slot_size = self.attr.max_message_size
        for batch in self.qp.completions:
            for gen, length, va in zip(
                batch.generations.tolist(),
                batch.byte_lens.tolist(),
                batch.remote_offsets.tolist(),
                strict=True,
            ):
                slot, within = divmod(va, slot_size)
                _, bound = self.bounds[(gen, slot)]
                assert length == 0 or within + length <= bound  # 0: immediate only, no write
        self.qp.completions.clear()
        self.qp.pending = 0


_RIG: _ReceiveRig | None = None


def _rig() -> _ReceiveRig:
    global _RIG
    if _RIG is None:
        _RIG = _ReceiveRig()
    return _RIG


def _datagram(rig: _ReceiveRig, r: Reader) -> tuple[bytes, tuple[str, int]]:
    """One datagram from the input: flags pick valid or fuzzed QPN, rkey, ICRC, source."""
    flags = r.u8()
    if flags & 0x80:  # raw bytes, exactly as fuzzed
        return r.take(r.u16() % 2048), _PEER if flags & 1 else _STRANGER
    gen, qpn = rig.endpoints[r.u8() % len(rig.endpoints)]
    qpn = qpn if flags & 1 else r.u32() & 0xFFFFFF
    rkey = rig.qp.rkeys[gen] if flags & 2 else r.u32()
    slot = r.u8() % rig.attr.max_messages
    va = slot * rig.attr.max_message_size + r.u16() % 1200 if flags & 4 else r.u64()
    imm = r.u32()
    payload = r.take(r.u16() % 1100)
    source = _PEER if flags & 8 else _STRANGER
    packet = bytearray(encode_packet(source, rig.local, qpn, r.u32(), va, rkey, imm, payload))
    if flags & 0x10:  # break the header after the ICRC was computed
        at = r.u8() % HEADER_SIZE
        packet[at] ^= r.u8() | 1
    if flags & 0x20:  # a wrong DMA length (consistent or not)
        struct.pack_into("!I", packet, 28, r.u32() & 0x7FF)
    if flags & 0x40:  # truncate
        del packet[r.u16() % max(len(packet), 1) :]
    return bytes(packet), source


@target("udp_receive")
def fuzz_udp_receive(data: bytes) -> None:
    """Batches of forged datagrams through the UDP receive path: nothing lands outside a
    posted buffer, and every placed packet belongs to a binding."""
    rig = _rig()
    n, from_peer = _load_batch(rig, data)
    rig.receiver._process(n)
    rig.check(from_peer)


def _load_batch(rig: _ReceiveRig, data: bytes) -> tuple[int, bool]:
    """Up to 8 datagrams from the input into the rig's staging ring: (how many, whether
    any came from the peer's address)."""
    r = Reader(data)
    count = 1 + r.u8() % 8
    n, from_peer = 0, False
    for i in range(count):
        if r.empty and i:
            break
        packet, source = _datagram(rig, r)
        rig.load(i, packet, source)
        from_peer |= source == _PEER
        n += 1
    return n, from_peer


# --- the native receive pass against the reference -------------------------------------------

_PAIR: tuple[_ReceiveRig, _ReceiveRig] | None = None


def _completions(qp: object) -> list[tuple[int, ...]]:
    rows: list[tuple[int, ...]] = []
    for batch in qp.completions:  # type: ignore[attr-defined]
        rows.extend(
            zip(
                batch.channels.tolist(),
                batch.generations.tolist(),
                batch.imms.tolist(),
                batch.byte_lens.tolist(),
                batch.remote_offsets.tolist(),
                batch.crcs.tolist(),  # each payload's CRC-32: both paths list it
                strict=True,
            )
        )
    return rows


@target("udp_native_receive")
def fuzz_udp_native_receive(data: bytes) -> None:
    """The same forged batch through the Python receive pass (and placement) on one rig and
    the native pass (backends/udp/_datapath.c, and native placement) on an identical one:
    same counters, completions, memory and key-table state, and nothing outside a buffer."""
    from sdr import placement
    from sdr.backends.udp import native

    if native.module is None or placement.place_batch_native is None:
        raise RuntimeError("the native datapath is not built")
    global _PAIR
    if _PAIR is None:
        _PAIR = (_ReceiveRig(), _ReceiveRig())
    rigs = _PAIR
    counts = [_load_batch(rig, data) for rig in rigs]
    previous = placement.use_datapath("python")
    try:
        rigs[0].receiver._process(counts[0][0])
    finally:
        placement.use_datapath(previous)
    placement.use_datapath("native")
    try:
        rigs[1].receiver.process_native(counts[1][0])
    finally:
        placement.use_datapath(previous)
    a, b = rigs
    assert a.transport.stats == b.transport.stats, (a.transport.stats, b.transport.stats)
    assert a.qp.counters() == b.qp.counters(), (a.qp.counters(), b.qp.counters())
    assert _completions(a.qp) == _completions(b.qp)
    assert a.memory == b.memory, "native and reference placed different bytes"
    for rig, (_, from_peer) in zip(rigs, counts, strict=True):
        rig.check(from_peer)
