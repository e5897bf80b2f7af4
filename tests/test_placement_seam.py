"""The software-NIC seam (sdr.placement): one packet sequence, one expected outcome.

The same sequence of packets (good, duplicate, stale generation, late, wrong message id,
out-of-range offset and length, misaligned, short, immediate-only, sealed, reopened) goes

1. straight through an implementation of :func:`sdr.placement.place_batch` (the
   ``implementation`` parameter: the Python reference and the native one, both in
   :data:`IMPLEMENTATIONS`), checked against hand-written verdicts, packet
   bytes, chunk counts, discard counters and memory;
2. through every software driver (inproc, udp, offload, the simulator's), which must
   place exactly what the implementation placed: same completions, same guard bytes,
   same counters, same bytes in memory, same chunk bitmap in the core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import sdr
from sdr.placement import (
    DISCARD_REASONS,
    DUPLICATE,
    LATE,
    MALFORMED,
    OUT_OF_RANGE,
    PLACED,
    STALE_GENERATION,
    PlacementGeometry,
    PlacementTable,
    chunk_bitmap,
    place_batch_native,
    place_batch_python,
)
from sdr.transport import Bind, CompletionBatch, TransportQP, WriteBatch

ATTR = sdr.QPAttr(
    mtu=100, chunk_size=200, max_message_size=1000, max_messages=4, channels=1, generations=2
)
GEOMETRY = PlacementGeometry.from_attr(ATTR)
GEN, SLOT, MSG, BASE, LENGTH = 0, 1, 5, 100, 550  # 6 packets (the last 50 bytes), 3 chunks
ROFF = SLOT * ATTR.max_message_size
MEMORY = 2048

IMPLEMENTATIONS: list[Any] = [
    pytest.param(place_batch_python, id="python"),
    pytest.param(
        place_batch_native,
        id="native",
        marks=pytest.mark.skipif(place_batch_native is None, reason="sdr._placement not built"),
    ),
]
"""Implementations of the place_batch signature under test (the reference and the C one);
the drivers below run whichever :data:`sdr.placement.DATAPATH` names."""


def _binding(region: sdr.MemoryRegion) -> Bind:
    """Entry (GEN, SLOT) -> message MSG at region[BASE:BASE + LENGTH]: what every test binds."""
    return Bind(generation=GEN, slot=SLOT, region=region, offset=BASE, length=LENGTH, msg_id=MSG)


def _imm(pkt: int, msg: int = MSG, fragment: int = 0) -> int:
    return ATTR.layout.encode(msg, pkt, fragment)


def _fill(pkt: int, n: int, salt: int = 0) -> bytes:
    return bytes([(pkt * 16 + salt + 1) & 0xFF]) * n


Packet = tuple[int, int, int, bytes]  # generation, remote offset, immediate, payload


@dataclass(frozen=True)
class Step:
    """Send ``packets`` (expecting ``verdicts``), or seal/reopen packets [start, stop)."""

    packets: tuple[Packet, ...] = ()
    verdicts: tuple[int, ...] = ()
    seal: tuple[int, int] | None = None
    reopen: tuple[int, int] | None = None


STEPS = [
    Step(
        packets=(
            (GEN, ROFF + 0, _imm(0), _fill(0, 100)),  # good
            (GEN, ROFF + 100, _imm(1), _fill(1, 100)),  # good: chunk 0 complete
            (GEN, ROFF + 0, _imm(0), _fill(0, 100, salt=9)),  # duplicate, other bytes
            (1, ROFF + 200, _imm(2), _fill(2, 100)),  # generation 1's entry is NULL: late
            (GEN, ROFF + 200, _imm(2, msg=6), _fill(2, 100)),  # wrong message id: late
            (GEN, 9 * ATTR.max_message_size, _imm(0), _fill(0, 100)),  # no such slot
            (GEN, ROFF + 500, _imm(5), _fill(5, 100)),  # past the bound 550 bytes
            (GEN, ROFF + 200, _imm(3), _fill(3, 100)),  # address is not packet 3's
            (GEN, ROFF + 200, _imm(2), _fill(2, 60)),  # short packet that is not the last
            (GEN, ROFF, _imm(1, fragment=7), b""),  # immediate-only: placed, writes nothing
            (GEN, ROFF, _imm(9, fragment=1), b""),  # immediate-only, impossible fragment
        ),
        verdicts=(
            PLACED,
            PLACED,
            DUPLICATE,
            LATE,
            LATE,
            OUT_OF_RANGE,
            OUT_OF_RANGE,
            MALFORMED,
            MALFORMED,
            PLACED,
            MALFORMED,
        ),  # fmt: skip
    ),
    Step(seal=(2, 4)),  # chunk 1 verified before its packets came: none may land
    Step(
        packets=(
            (GEN, ROFF + 200, _imm(2), _fill(2, 100)),
            (GEN, ROFF + 300, _imm(3), _fill(3, 100)),
            (GEN, ROFF + 500, _imm(5), _fill(5, 50)),  # the short last packet: good
            (GEN, ROFF + 500, _imm(5), _fill(5, 50, salt=3)),  # its twin in the same batch
        ),
        verdicts=(DUPLICATE, DUPLICATE, PLACED, DUPLICATE),
    ),
    Step(reopen=(2, 4)),  # chunk 1 failed its check: the repair may land
    Step(
        packets=(
            (GEN, ROFF + 300, _imm(3), _fill(3, 100, salt=5)),
            (GEN, ROFF + 200, _imm(2), _fill(2, 100, salt=5)),
            (GEN, ROFF + 400, _imm(4), _fill(4, 100)),
            (GEN, ROFF + 200, _imm(2), _fill(2, 100, salt=6)),  # a late copy of the repair
        ),
        verdicts=(PLACED, PLACED, PLACED, DUPLICATE),
    ),
]


def _expected_memory() -> bytes:
    memory = bytearray(MEMORY)
    for pkt, data in [
        (0, _fill(0, 100)),
        (1, _fill(1, 100)),
        (5, _fill(5, 50)),
        (3, _fill(3, 100, salt=5)),
        (2, _fill(2, 100, salt=5)),
        (4, _fill(4, 100)),
    ]:
        memory[BASE + pkt * 100 : BASE + pkt * 100 + len(data)] = data
    return bytes(memory)


def _expected_discards() -> dict[str, int]:
    codes = [v for step in STEPS for v in step.verdicts]
    return {name: codes.count(code + 1) for code, name in enumerate(DISCARD_REASONS)}


def _columns(packets: tuple[Packet, ...]) -> tuple[np.ndarray, ...]:
    gens, roffs, imms, payloads = zip(*packets, strict=True)
    return (
        np.array(gens, dtype=np.int64),
        np.array(roffs, dtype=np.int64),
        np.array(imms, dtype=np.uint32),
        np.array([len(p) for p in payloads], dtype=np.int64),
    )


@pytest.mark.parametrize("payload_form", ["staging", "buffers", "none"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_seam_places_exactly_the_expected_packets(
    implementation: Callable[..., np.ndarray], payload_form: str
) -> None:
    memory = bytearray(MEMORY)
    table = PlacementTable(GEOMETRY)
    table.bind(_binding(sdr.MemoryRegion(key=7, view=memoryview(memory))), 7)  # region 7
    table.packets[SLOT + 1, :] = 1  # another slot's state is never touched
    for step in STEPS:
        if step.seal:
            table.set_packets(SLOT, *step.seal, 1)
        if step.reopen:
            table.set_packets(SLOT, *step.reopen, 0)
        if not step.packets:
            continue
        gens, roffs, imms, lengths = _columns(step.packets)
        payloads = [p[3] for p in step.packets]
        if payload_form == "staging":  # one buffer, payloads at offsets (the udp ring)
            staging = memoryview(b"\xee" * 3 + b"".join(payloads))
            offsets = 3 + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            verdicts = implementation(table, gens, roffs, imms, lengths, staging, offsets)
        else:
            verdicts = implementation(
                table, gens, roffs, imms, lengths, payloads if payload_form == "buffers" else None
            )
        assert verdicts.dtype == np.uint8
        assert verdicts.tolist() == list(step.verdicts)
    assert table.packets[SLOT, :6].tolist() == [1] * 6
    assert not table.packets[SLOT, 6:].any() and table.packets[SLOT + 1].all()
    # the seal placed nothing: chunk 1 counts only its repair
    assert table.counts[SLOT, :3].tolist() == [2, 2, 2] and not table.counts[SLOT, 3:].any()
    assert chunk_bitmap(GEOMETRY, table.packets[SLOT], table.counts[SLOT], LENGTH).all()
    assert table.discard_counts() == _expected_discards()
    if payload_form == "none":
        assert not any(memory)
    else:
        assert bytes(memory) == _expected_memory()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_seam_refuses_unbound_and_out_of_table_addresses(
    implementation: Callable[..., np.ndarray],
) -> None:
    table = PlacementTable(GEOMETRY)
    region = sdr.MemoryRegion(key=0, view=memoryview(bytearray(MEMORY)))
    table.bind(Bind(generation=1, slot=0, region=region, offset=0, length=1000, msg_id=3), 0)
    rows = [
        (2, 0, _imm(0, msg=3), 100),  # generation past the QP's
        (-1, 0, _imm(0, msg=3), 100),
        (1, -100, _imm(0, msg=3), 100),  # negative address
        (1, 4 * ATTR.max_message_size, _imm(0, msg=3), 100),  # slot past the table
        (1, 0, _imm(0, msg=3), -1),  # negative length
        (0, 0, _imm(0, msg=3), 100),  # the other generation's entry: NULL
        (1, 0, _imm(0, msg=3), 100),  # good
    ]
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows, strict=True)]
    verdicts = implementation(table, cols[0], cols[1], cols[2].astype(np.uint32), cols[3], None)
    assert verdicts.tolist() == [STALE_GENERATION, STALE_GENERATION, OUT_OF_RANGE,
                                 OUT_OF_RANGE, OUT_OF_RANGE, LATE, PLACED]  # fmt: skip
    table.unbind(1, 0)
    assert implementation(table, cols[0][-1:], cols[1][-1:], cols[2][-1:].astype(np.uint32),
                          cols[3][-1:], None).tolist() == [LATE]  # fmt: skip


def test_the_key_table_resolves_through_the_seam() -> None:
    """KeyTable.resolve is the seam on one packet: same verdicts, same counters."""
    from sdr.key_table import KeyTable, Placement

    keys = KeyTable(ATTR)
    region = sdr.MemoryRegion(key=1, view=memoryview(bytearray(MEMORY)))
    keys.bind(_binding(region))
    names = ("placed", *DISCARD_REASONS)
    got = []
    for step in STEPS:
        if step.seal:
            keys.seal(GEN, SLOT, *step.seal)
        if step.reopen:
            keys.reopen(GEN, SLOT, *step.reopen)
        for gen, roff, imm, payload in step.packets:
            where = keys.resolve(gen, roff, len(payload), imm)
            got.append("placed" if isinstance(where, Placement) else where)
    assert got == [names[v] for step in STEPS for v in step.verdicts]
    assert keys.discards() == _expected_discards()


# --- the drivers -----------------------------------------------------------------------


@dataclass
class Rig:
    """A connected pair of transport QPs; ``rx`` receives into ``memory``."""

    tx: TransportQP
    rx: TransportQP
    register_tx: Callable[[np.ndarray], sdr.MemoryRegion]
    memory: np.ndarray
    region: sdr.MemoryRegion
    settle: Callable[[], None]
    guard: Callable[[], np.ndarray]
    close: Callable[[], None]


def _inproc_rig() -> Rig:
    from sdr.backends.inproc import InprocNetwork, InprocTransport

    net = InprocNetwork(seed=1)
    ta, tb = InprocTransport(net), InprocTransport(net)
    return _connect(ta, tb, lambda: None, lambda rx: rx.keys.guard(GEN, SLOT))


def _udp_rig() -> Rig:
    from sdr.backends.udp import UdpTransport

    ta, tb = UdpTransport(port=0), UdpTransport(port=0)

    def close() -> None:
        ta.close()
        tb.close()

    return _connect(ta, tb, lambda: tb.wait(0.001), lambda rx: rx.keys.guard(GEN, SLOT), close)


def _offload_rig() -> Rig:
    from sdr.backends.offload import OffloadTransport

    ta, tb = OffloadTransport(progress="cpu"), OffloadTransport(progress="cpu")

    def guard(rx: Any) -> np.ndarray:
        return rx.shared.placement_table(0, {}).packets[SLOT, :6].copy()

    def close() -> None:
        ta.close()
        tb.close()

    return _connect(ta, tb, lambda: tb.wait(0.001), guard, close, alloc=tb.alloc)


def _des_rig() -> Rig:
    import simpy

    from sdr.simulator.des_transport import DesFabric
    from sdr.simulator.link import Link

    env = simpy.Environment()
    fabric = DesFabric(env, Link(1e9, 0.001, mtu=100, chunk_size=200), copy_payload=True)
    ta, tb = fabric.host("a"), fabric.host("b")
    return _connect(
        ta, tb, lambda: env.run(until=env.now + 0.01), lambda rx: rx.keys.guard(GEN, SLOT)
    )


def _connect(
    ta: Any,
    tb: Any,
    settle: Callable[[], None],
    guard: Callable[[Any], np.ndarray],
    close: Callable[[], None] = lambda: None,
    alloc: Callable[[int], np.ndarray] | None = None,
) -> Rig:
    tx, rx = ta.create_qp(ATTR), tb.create_qp(ATTR)
    tx.connect(rx.info())
    rx.connect(tx.info())
    memory = alloc(MEMORY) if alloc else np.zeros(MEMORY, dtype=np.uint8)
    region = tb.register(memory)

    def close_all() -> None:
        tx.close()
        rx.close()
        close()

    return Rig(tx, rx, ta.register, memory, region, settle, lambda: guard(rx), close_all)


DRIVERS = {"inproc": _inproc_rig, "udp": _udp_rig, "offload": _offload_rig, "des": _des_rig}


def _run(rig: Rig) -> dict[str, Any]:
    """Drive STEPS through a driver; returns what it placed and counted."""
    rig.rx.bind(_binding(rig.region))
    rows: list[list[tuple[int, int, int]]] = []
    for step in STEPS:
        if step.seal:
            rig.rx.seal(GEN, SLOT, *step.seal)
        if step.reopen:
            rig.rx.reopen(GEN, SLOT, *step.reopen)
        if not step.packets:
            continue
        before = sum(rig.rx.counters().get(r, 0) for r in DISCARD_REASONS)
        src = np.frombuffer(b"".join(p[3] for p in step.packets) or b"\0", dtype=np.uint8).copy()
        region, start = rig.register_tx(src), 0
        for gen, roff, imm, payload in step.packets:  # one write each: order is kept
            one = lambda a, t: np.array([a], dtype=t)  # noqa: E731
            rig.tx.post_writes(
                WriteBatch(region, gen, one(0, np.uint16), one(roff, np.int64),
                           one(imm, np.uint32), one(start, np.int64), one(len(payload), np.int64))
            )  # fmt: skip
            start += len(payload)
        got: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            rig.settle()
            batch: CompletionBatch = rig.rx.poll_completions(1024)
            got += list(zip(batch.imms.tolist(), batch.byte_lens.tolist(),
                            batch.remote_offsets.tolist(), strict=True))  # fmt: skip
            counted = sum(rig.rx.counters().get(r, 0) for r in DISCARD_REASONS) - before
            if len(got) + counted >= len(step.packets):
                break
        rows.append(got)
    core = sdr.QueuePairCore(ATTR)
    rec = core.post_recv(0.0, rig.region, BASE, LENGTH)  # seq 0: message id 0, slot 0
    events = []
    for got in rows:  # the core's view of the same placements (its receive 0)
        fixed = []
        for imm, n, _ in got:
            _, pkt, fragment = ATTR.layout.decode(imm)
            remote = rec.slot * ATTR.max_message_size + pkt * ATTR.mtu
            fixed.append((0, rec.generation, _imm(pkt, rec.msg_id, fragment), n, remote))
        events.append(core.receive_completions(0.0, CompletionBatch.from_rows(fixed)))
    counters = rig.rx.counters()
    return {
        "rows": rows,
        "discards": {r: counters.get(r, 0) for r in DISCARD_REASONS},
        "guard": np.asarray(rig.guard())[:6].tolist(),
        "memory": bytes(rig.memory),
        "bitmap": rec.bitmap.chunks.tolist(),
        "events": [[int(c) for v in e.values() for c in v] for e in events],
    }


@pytest.fixture(params=sorted(DRIVERS), ids=str)
def driver(request: pytest.FixtureRequest) -> Iterator[Rig]:
    rig = DRIVERS[request.param]()
    try:
        yield rig
    finally:
        rig.close()


def _reference() -> dict[str, Any]:
    """What the drivers must report: the hand-written expectation of STEPS."""
    rows = []
    for step in STEPS:
        if step.packets:
            rows.append([(imm, len(p), roff) for (_, roff, imm, p), v in
                         zip(step.packets, step.verdicts, strict=True) if v == PLACED])  # fmt: skip
    return {
        "rows": rows,
        "discards": _expected_discards(),
        "guard": [1] * 6,
        "memory": _expected_memory(),
        "bitmap": [True, True, True],
        "events": [[0], [], [1, 2]],
    }


def test_every_driver_places_exactly_what_the_seam_places(driver: Rig) -> None:
    got = _run(driver)
    want = _reference()
    for key in want:
        assert got[key] == want[key], key
