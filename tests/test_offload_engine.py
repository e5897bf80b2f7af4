"""The offload engine's per-packet work, without processes or sockets.

The engine must decide exactly as the core's KeyTable does, packet by packet; its ring
must wrap and stop when full; its chunk state must match what arrived.
"""

from __future__ import annotations

import numpy as np
import pytest

import sdr
from sdr.backends.offload.engine import ChannelEngine, drain
from sdr.backends.offload.shared_state import QPShared, layout_for
from sdr.backends.offload.wire import (
    HEADER,
    SyntheticSource,
    encode_header,
    make_source,
    parse_header,
)
from sdr.key_table import KeyTable, Placement
from sdr.transport import Bind, MemoryRegion

ATTR = sdr.QPAttr(
    mtu=64, chunk_size=256, max_message_size=1024, max_messages=4, channels=2, generations=2
)


def _state(attr: sdr.QPAttr = ATTR, ring: int = 8192) -> QPShared:
    lay = layout_for(attr)
    lay = type(lay)(**{**lay.as_dict(), "ring_capacity": ring})
    shared = QPShared(memoryview(bytearray(lay.nbytes)), lay)
    for g in range(attr.generations):
        for s in range(attr.max_messages):
            shared.clear_entry(g, s)
    return shared


def _packet(gen: int, roff: int, imm: int, payload: bytes) -> memoryview:
    return memoryview(encode_header(gen, 0, imm, roff) + payload)


def test_header_round_trip_and_malformed() -> None:
    assert parse_header(memoryview(encode_header(3, 7, 0xDEADBEEF, 1 << 40))) == (
        3,
        7,
        0xDEADBEEF,
        1 << 40,
    )
    assert parse_header(memoryview(b"short")) is None
    assert parse_header(memoryview(b"\0" * HEADER.size)) is None  # wrong magic


def test_unknown_source_kind_is_a_config_error() -> None:
    with pytest.raises(sdr.ConfigError, match="unknown packet source"):
        make_source(("carrier-pigeon",))


def test_engine_agrees_with_the_key_table() -> None:
    rng = np.random.default_rng(11)
    shared = _state()
    memory = bytearray(4096)
    region = MemoryRegion(key=1, view=memoryview(memory))
    table = KeyTable(ATTR)
    engine = ChannelEngine(shared, 1, {0: memoryview(memory)})
    binds = [(0, 0, 0, 1000, 5), (1, 2, 1024, 700, 6), (0, 3, 2048, 64, 7)]
    for gen, slot, off, length, msg in binds:
        table.bind(
            Bind(generation=gen, slot=slot, region=region, offset=off, length=length, msg_id=msg)
        )
        shared.write_entry(gen, slot, 0, off, length, msg)
    reference = bytearray(4096)
    taken = 0
    lay, mtu = ATTR.layout, ATTR.mtu
    for _ in range(3000):
        gen = int(rng.integers(0, 3))
        slot = int(rng.integers(0, 5))
        pkt = int(rng.integers(0, 17))
        within = pkt * mtu + int(rng.choice([0, 0, 0, 8]))
        msg = int(rng.choice([5, 6, 7, 8]))
        length = int(rng.choice([0, mtu, 40, 39, 16]))
        imm = lay.encode(msg, pkt, int(rng.integers(0, 16)))
        payload = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
        roff = slot * ATTR.max_message_size + within
        expected = table.resolve(gen, roff, length, imm)
        before = shared.discard_counts()
        accepted = engine.handle(_packet(gen, roff, imm, payload))
        assert accepted == isinstance(expected, Placement)
        taken += accepted
        if isinstance(expected, Placement):
            reference[expected.offset : expected.offset + length] = payload
        else:
            after = shared.discard_counts()
            assert after[expected] == before[expected] + 1
    assert memory == reference
    records = shared.read_ring(1, 10_000)
    assert 0 < len(records) == taken
    assert set((records[:, 0] >> 8).tolist()) == {1}


def test_ring_wraps_and_stops_when_full() -> None:
    shared = _state(ring=8)
    memory = bytearray(1024)
    shared.write_entry(0, 0, 0, 0, 1024, 1)
    engine = ChannelEngine(shared, 0, {0: memoryview(memory)})
    lay = ATTR.layout
    packets = [
        bytes(_packet(0, p * 64, lay.encode(1, p, p % 16), bytes([p]) * 64)) for p in range(16)
    ]
    source = SyntheticSource(packets, rounds=1)
    assert drain(engine, source, 100) == 8  # the ring holds 8 records
    assert engine.room() == 0 and drain(engine, source, 100) == 0
    first = shared.read_ring(0, 5)
    assert drain(engine, source, 100) == 5
    rest = shared.read_ring(0, 100)
    imms = np.concatenate([first[:, 1], rest[:, 1]]).tolist()
    assert imms == [lay.encode(1, p, p % 16) for p in range(13)]
    assert memory[: 13 * 64] == b"".join(bytes([p]) * 64 for p in range(13))


def test_chunk_state_counts_once_per_packet_across_channels() -> None:
    shared = _state()
    memory = bytearray(1024)
    shared.write_entry(0, 1, 0, 0, 600, 2)
    engines = [ChannelEngine(shared, ch, {0: memoryview(memory)}) for ch in range(2)]
    lay = ATTR.layout

    def send(ch: int, p: int, fill: bytes = b"x") -> bool:
        length = min(64, 600 - p * 64)
        imm = lay.encode(2, p, 0)
        return engines[ch].handle(_packet(0, 1024 + p * 64, imm, fill * length))

    for p in range(4):  # chunk 0 (packets 0-3) over both channels, with duplicates
        assert send(p % 2, p)
        assert not send((p + 1) % 2, p, b"y")  # the first copy wins: never rewritten
    assert shared.discard_counts()["duplicates"] == 4
    assert memory[:256] == b"x" * 256
    for p in (4, 5, 6, 8, 9):  # chunk 1 misses packet 7; chunk 2 (8-9, last) complete
        assert send(0, p)
    assert shared.chunk_bitmap(1, 600).tolist() == [True, False, True]
    assert send(1, 7)
    assert shared.chunk_bitmap(1, 600).tolist() == [True, True, True]
    shared.reset_slot(1)
    assert shared.chunk_bitmap(1, 600).tolist() == [False, False, False]


def test_roce_source_feeds_the_engine_through_the_udp_codec() -> None:
    roce = pytest.importorskip("sdr.backends.offload.roce_wire")
    import socket

    from sdr.backends.udp.roce import encode_packet

    qpn = roce.qpn_of(5, 1, 0, ATTR.channels)
    source = roce.RoceSource("127.0.0.1", {qpn: 1})
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    try:
        shared = _state()
        memory = bytearray(1024)
        shared.write_entry(1, 0, 0, 0, 200, 3)
        engine = ChannelEngine(shared, 0, {0: memoryview(memory)})
        lay, src, dst = ATTR.layout, sender.getsockname(), source.local
        good = encode_packet(src, dst, qpn, 0, 64, 0, lay.encode(3, 1, 9), b"\x07" * 64)
        unknown = encode_packet(src, dst, qpn + 1, 1, 0, 0, lay.encode(3, 0, 9), b"\x01" * 64)
        corrupt = bytearray(encode_packet(src, dst, qpn, 2, 0, 0, lay.encode(3, 0, 9), b"x" * 64))
        corrupt[40] ^= 0xFF  # payload bit flip: the ICRC no longer matches
        for datagram in (good, unknown, bytes(corrupt), b"\x2b" * 8):
            sender.sendto(datagram, dst)
        taken = 0
        for _ in range(1000):
            taken += drain(engine, source, 10)
            if taken == 4:
                break
        assert taken == 4
        assert memory[64:128] == b"\x07" * 64 and memory.count(0) == 1024 - 64
        assert shared.discard_counts()["malformed"] == 3
        records = shared.read_ring(0, 10)
        assert records[:, 1].tolist() == [lay.encode(3, 1, 9)] and records[0, 0] == 1  # gen 1
    finally:
        source.close()
        sender.close()
