"""Fuzz target for the native receive step: ``sdr._placement`` against the reference.

``placement_native`` turns the fuzz input into a placement table (an immediate split, a
geometry, bindings that are good, torn or garbage, sealed packet bytes, regions that are
missing or read-only) and a batch (good packets, duplicates, stale, late, out-of-range,
misaligned, short, immediate-only and garbage int64 values) in one of the three payload
forms, then runs both implementations on copies of the table. Any difference in
verdicts, packet bytes, chunk counts, discard counters or memory is a crash; so is a
native call that raises where the reference did not, or one that raises having written
something. tests/test_placement_native.py drives :func:`build_case` from hypothesis.

The reference copies with Python slice assignment, which clamps: a copy that starts
past a buffer's end, or a negative start (which wraps), or a region and a payload that
are both too short by the same amount would pass there, where the native step refuses
the batch. So the reference runs over :class:`StrictRegion` views, which raise for a
copy that does not fit exactly (as memoryview does in every other case), and offsets
are drawn >= 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from registry import Reader, target

from sdr.immediate import ImmediateLayout
from sdr.placement import PlacementGeometry, PlacementTable, place_batch_native, place_batch_python
from sdr.transport import Bind, MemoryRegion

__all__ = ["Case", "build_case", "differential", "fuzz_placement_native"]

Draw = Callable[[int, int], int]
"""draw(lo, hi): an integer in [lo, hi], from hypothesis or from fuzz bytes."""

SPLITS = ((10, 18, 4), (8, 22, 2), (4, 4, 24), (20, 11, 1))
EDGES = (0, 1, -1, 2, 255, 256, 1 << 31, (1 << 32) - 1, 1 << 62, (1 << 63) - 1, -(1 << 63))
FORMS = ("staging", "buffers", "none")
_RO_REGION, _MISSING_REGION = 4, 3  # region ids: a read-only buffer, and none at all


class StrictRegion:
    """A region for the reference: ``region[a:b] = data`` must fit exactly, or raise."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view

    def __setitem__(self, key: slice, value: Any) -> None:
        n = len(memoryview(value))
        if not 0 <= key.start <= key.stop <= len(self.view) or key.stop - key.start != n:
            raise ValueError(f"a copy of {n} bytes to [{key.start}:{key.stop}] does not fit")
        self.view[key] = value

    def __bytes__(self) -> bytes:
        return bytes(self.view)


@dataclass
class Case:
    """One table and one batch, rebuilt fresh for each implementation by :meth:`table`."""

    geometry: PlacementGeometry
    region_sizes: list[int]
    bindings: list[tuple[int, int, int, int, int, int]]
    entries_garbage: list[tuple[int, int, int]]
    seals: list[tuple[int, int]]
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    payloads: list[bytes]
    payload_offsets: np.ndarray
    form: str

    def table(self, strict: bool = False) -> PlacementTable:
        regions: dict[int, Any] = {
            i: memoryview(bytearray((i * 37 + j) & 0xFF for j in range(size)))
            for i, size in enumerate(self.region_sizes)
        }
        regions[_RO_REGION] = memoryview(bytes(64))
        table = PlacementTable(self.geometry)
        for gen, slot, region, offset, length, msg_id in self.bindings:
            mr = MemoryRegion(key=region, view=regions.get(region, memoryview(b"")))
            table.bind(
                Bind(generation=gen, slot=slot, region=mr, offset=offset, length=length,
                     msg_id=msg_id),
                region,
            )  # fmt: skip
        # then the case's own regions over the views bind kept: _MISSING_REGION absent,
        # the reference's strict
        table.regions = {k: StrictRegion(v) for k, v in regions.items()} if strict else regions
        for row, word, value in self.entries_garbage:
            table.entries[row, word] = value
        for slot, pkt in self.seals:
            table.set_packets(slot, pkt, pkt + 1, 1)
        return table

    def args(self) -> tuple[Any, ...]:
        if self.form == "staging":
            staging = memoryview(b"\xee" * 5 + b"".join(self.payloads))
            return (*self.columns, staging, self.payload_offsets)
        return (*self.columns, list(self.payloads) if self.form == "buffers" else None)


def _garbage(draw: Draw) -> int:
    if draw(0, 1):
        return EDGES[draw(0, len(EDGES) - 1)]
    return draw(-(1 << 63), (1 << 63) - 1)


def build_case(draw: Draw, max_rows: int = 24) -> Case:
    """A random table and batch from ``draw``."""
    layout = ImmediateLayout(*SPLITS[draw(0, len(SPLITS) - 1)])
    mtu = draw(1, 64)
    slot_size = mtu * draw(1, 6) + draw(0, mtu - 1)
    g = PlacementGeometry(layout, draw(1, 3), draw(1, 4), slot_size, mtu, draw(1, 4))
    region_sizes = [draw(0, 600) for _ in range(3)]
    bindings = []
    for _ in range(draw(0, 5)):
        region = draw(0, 4)  # 3: not in table.regions; 4: read-only
        offset = draw(0, 400) if draw(0, 7) else _garbage(draw) & ((1 << 63) - 1)
        length = draw(0, slot_size) if draw(0, 7) else draw(0, 4 * slot_size)
        msg_id = draw(0, 3) if draw(0, 7) else draw(0, layout.max_message_ids - 1)
        bindings.append((draw(0, g.generations - 1), draw(0, g.slots - 1), region, offset,
                         length, msg_id))  # fmt: skip
    entries_garbage = [
        (draw(0, g.generations * g.slots - 1), draw(1, 4), _garbage(draw))
        for _ in range(draw(0, 1) * draw(0, 3))
    ]
    seals = [(draw(0, g.slots - 1), draw(0, g.max_packets - 1)) for _ in range(draw(0, 3))]
    rows: list[tuple[int, int, int, int]] = []  # generation, remote offset, imm, length
    for _ in range(draw(0, max_rows)):
        kind = draw(0, 9)
        if kind == 0 and rows:  # a copy of an earlier packet
            rows.append(rows[draw(0, len(rows) - 1)])
            continue
        if kind == 1:  # garbage everywhere
            rows.append((_garbage(draw), _garbage(draw), draw(0, (1 << 32) - 1), _garbage(draw)))
            continue
        gen, slot, _, _, length, msg_id = (
            bindings[draw(0, len(bindings) - 1)] if bindings else (0, 0, 0, 0, slot_size, 0)
        )
        pkt = draw(0, max(0, -(-length // mtu)))
        nbytes = max(0, min(mtu, length - pkt * mtu))
        roff = slot * slot_size + pkt * mtu
        fragment = draw(0, (1 << layout.user_bits) - 1)
        imm_pkt = pkt & (layout.max_packets - 1)
        if kind == 2:  # stale generation
            gen += g.generations * draw(1, 2) if draw(0, 1) else -draw(1, 3) - gen
        elif kind == 3:  # late: another message id
            msg_id = (msg_id + draw(1, 3)) % layout.max_message_ids
        elif kind == 4:  # out of range: past the table, negative or too long
            roff, nbytes = (
                (g.slots * slot_size + draw(0, 99), nbytes)
                if draw(0, 1)
                else (roff, nbytes + draw(1, 3 * mtu))
            )
        elif kind == 5:  # malformed: misaligned or short
            roff, nbytes = (roff + draw(1, mtu), nbytes) if draw(0, 1) else (roff, nbytes - 1)
        elif kind == 6:  # immediate-only
            nbytes, imm_pkt = 0, draw(0, 2 * layout.fragments) & (layout.max_packets - 1)
        rows.append((gen, roff, layout.encode(msg_id, imm_pkt, fragment), nbytes))
    gens = [r[0] for r in rows]
    columns = (
        np.array(gens, dtype=np.uint8 if draw(0, 3) == 0 and all(0 <= x < 256 for x in gens)
                 else np.int64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=np.uint32),
        np.array([r[3] for r in rows], dtype=np.int64),
    )  # fmt: skip
    payloads = []
    for i, (_, _, _, n) in enumerate(rows):
        size = max(0, min(n, 4096)) if draw(0, 7) else draw(0, 80)  # sometimes short
        payloads.append(bytes([(i * 29 + 3) & 0xFF]) * size)
    starts = 5 + np.concatenate([[0], np.cumsum([len(p) for p in payloads])[:-1]]).astype(int)
    offsets = [int(s) if draw(0, 15) else _garbage(draw) & ((1 << 63) - 1) for s in starts]
    form = FORMS[draw(0, 2)]
    return Case(g, region_sizes, bindings, entries_garbage, seals, columns, payloads,
                np.array(offsets[: len(rows)], dtype=np.int64), form)  # fmt: skip


def _state(table: PlacementTable) -> tuple[Any, ...]:
    return (
        table.packets.tobytes(),
        table.counts.tobytes(),
        table.discards.tolist(),
        {k: bytes(v) for k, v in table.regions.items()},
    )


def _run(
    impl: Callable[..., np.ndarray], case: Case, strict: bool = False
) -> tuple[Any, Exception | None, Any]:
    table = case.table(strict)
    try:
        verdicts = impl(table, *case.args())
    except (TypeError, ValueError, IndexError) as exc:
        return None, exc, _state(table)
    return verdicts, None, _state(table)


def differential(case: Case) -> None:
    """Both implementations on ``case``: identical results, or both refuse the batch
    (the native one having written nothing)."""
    ref, ref_error, ref_state = _run(place_batch_python, case, strict=True)
    got, error, state = _run(place_batch_native, case)
    if ref_error is not None:
        assert error is not None, f"the reference raised {ref_error!r}, native returned {got}"
        assert state == _state(case.table()), f"native raised {error!r} but wrote first"
        return
    assert error is None, f"native raised {error!r}, the reference returned {ref.tolist()}"
    assert got.dtype == np.uint8 and got.tolist() == ref.tolist(), (got, ref)
    assert state == ref_state, "same verdicts, different table or memory"


def reader_draw(reader: Reader) -> Draw:
    def draw(lo: int, hi: int) -> int:
        span = hi - lo + 1
        return lo + (reader.u64() if span > 255 else reader.u8()) % span

    return draw


@target("placement_native")
def fuzz_placement_native(data: bytes) -> None:
    """The native place_batch against the Python reference on a fuzzed table and batch."""
    if place_batch_native is None:
        return
    differential(build_case(reader_draw(Reader(data))))
