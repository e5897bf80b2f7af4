"""The receive table's native arrival marking (``sdr._placement.mark_arrivals``) against
the two Python paths (row by row and vectorized): mostly honest traffic with duplicates,
reordering, immediate-only rows and a few forged ones, in batches of 1 to 200 rows over
several receives at once. Same counters, bitmaps, immediates and completed-chunk events,
and, for batches that carry payload checksums (some unknown, duplicates with others),
the same kept packet checksums (the first copy's) and the same chunk checksums combined
from them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sdr
from sdr import placement, recv_table
from sdr.transport import CompletionBatch

needs_native = pytest.mark.skipif(
    placement.mark_arrivals_native is None, reason="sdr._placement not built"
)
ATTR = sdr.QPAttr(mtu=1000, chunk_size=4000, max_message_size=40_000, generations=3)
SIZES = (39_500, 4_000, 1, 0, 12_345)  # a short last packet, one chunk, one byte, none


def traffic(seed: int, recs: list) -> list[list[tuple[int, int, int, int, int, int]]]:
    """Batches of (channel, generation, imm, length, remote offset, payload CRC) for
    ``recs``; the CRC is -1 (not known) for a few rows, and a duplicate's differs."""
    rng = np.random.default_rng(seed)
    enc, rows = ATTR.layout.encode, []

    def crc() -> int:
        return -1 if rng.random() < 0.05 else int(rng.integers(0, 1 << 32))

    for index, rec in enumerate(recs):
        size = SIZES[index]
        n = max(1, -(-size // ATTR.mtu))
        for pkt in range(n):
            length = min(ATTR.mtu, size - pkt * ATTR.mtu)
            row = (0, rec.generation, enc(rec.msg_id, pkt, (pkt * 7 + index) % 16), length,
                   rec.slot * ATTR.max_message_size + pkt * ATTR.mtu)  # fmt: skip
            rows.append((*row, crc()))
            for _ in range(int(rng.integers(0, 3)) if rng.random() < 0.2 else 0):
                rows.append((*row, crc()))  # duplicates
            if rng.random() < 0.05:  # a forged generation, an immediate-only row
                rows.append((0, (rec.generation + 1) % 3, *row[2:], crc()))
                rows.append((0, rec.generation, row[2], 0, row[4], crc()))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    batches, at = [], 0
    while at < len(rows):
        size = int(rng.choice([1, 2, 5, 31, 48, 49, 200]))
        batches.append(rows[at : at + size])
        at += size
    return batches


def run(datapath: str, small: int, seed: int, crcs: bool = False) -> tuple:
    recv_table.SMALL_BATCH, saved = small, recv_table.SMALL_BATCH
    previous = placement.use_datapath(datapath)
    try:
        core = sdr.QueuePairCore(ATTR)
        mr = sdr.MemoryRegion(key=1, view=memoryview(bytearray(len(SIZES) * 40_000)))
        recs = [core.post_recv(0.0, mr, i * 40_000, n) for i, n in enumerate(SIZES)]
        events = []
        for rows in traffic(seed, recs):
            batch = CompletionBatch.from_rows([row[:5] for row in rows])
            if crcs:
                batch = dataclasses.replace(batch, crcs=np.array([r[5] for r in rows], np.int64))
            done = core.receive_completions(0.0, batch)
            events.append(sorted((recs.index(r), c.dtype.str, c.tolist()) for r, c in done.items()))
        sums = [None if r.bitmap.sums is None else r.bitmap.sums.tolist() for r in recs]
        every = [np.arange(r.bitmap.n_chunks) for r in recs]
        return (
            core.counters.as_dict(),
            [r.bitmap.packets.tolist() for r in recs],
            [r.bitmap.chunks.tolist() for r in recs],
            [r.bitmap._counts.tolist() for r in recs],
            [(r.imm, r.arrived) for r in recs],
            events,
            sums,
            [r.bitmap.chunk_sums(c).tolist() for r, c in zip(recs, every, strict=True)],
        )
    finally:
        recv_table.SMALL_BATCH = saved
        placement.use_datapath(previous)


@needs_native
@pytest.mark.parametrize("crcs", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_native_marking_equals_both_python_paths(seed: int, crcs: bool) -> None:
    rows_path = run("python", 10**6, seed, crcs)
    vector_path = run("python", 0, seed, crcs)
    native = run("native", 0, seed, crcs)
    assert rows_path == vector_path
    assert native == rows_path
    counters = native[0]
    assert counters["duplicates"] > 0 and counters["packets_accepted"] > 0  # exercised
    assert sum(len(e) for e in native[5]) > 0
    sums, chunk_sums = native[6], native[7]
    if crcs:  # kept where known, and some chunks combined, some not (a -1 among them)
        assert all(s is not None for s in sums[:1])
        flat = [c for rec in chunk_sums for c in rec]
        assert any(c >= 0 for c in flat)
    else:
        assert sums == [None] * len(SIZES) and all(c == -1 for r in chunk_sums for c in r)


@needs_native
def test_an_offset_outside_the_receive_is_refused_before_any_write() -> None:
    bitmap = sdr.chunk_bitmap.ReceiveBitmap(5_000, 1000, 2000)
    have, fragments = np.zeros(4, bool), np.zeros(4, np.uint32)
    before = bitmap.packets.copy()
    with pytest.raises(ValueError, match="outside the receive's 5 packets; nothing was marked"):
        placement.mark_arrivals_native(
            bitmap.packets, bitmap._counts, bitmap._expected, bitmap.chunks, have, fragments,
            np.array([1, 5], np.int64), np.array([3, 4], np.uint32),
            np.array([1000, 1000], np.int64), 2,
        )  # fmt: skip
    assert (bitmap.packets == before).all() and not have.any() and not bitmap._counts.any()
    with pytest.raises(TypeError, match="counts must be a 1-D array of format I"):
        placement.mark_arrivals_native(
            bitmap.packets, bitmap._counts.astype(np.int64), bitmap._expected, bitmap.chunks,
            have, fragments, np.array([1], np.int64), np.array([3], np.uint32),
            np.array([1000], np.int64), 2,
        )  # fmt: skip


def test_a_build_without_mark_arrivals_falls_back_to_the_reference(monkeypatch) -> None:
    """An editable install whose ``sdr._placement`` predates ``mark_arrivals`` (pulled,
    not rebuilt) imported with an AttributeError; now it runs the Python paths."""
    monkeypatch.setattr(placement, "mark_arrivals_native", None)
    with_reference = run("python", 0, seed=3)
    assert run("native" if placement.place_batch_native else "python", 0, seed=3) == with_reference


@pytest.mark.parametrize("datapath", ["native", "python"])
def test_a_placed_batch_counts_late_and_stale_rows_as_an_unplaced_one(datapath: str) -> None:
    """A batch the driver placed against this core's key table (``validated``) skips the
    packet checks, but a row for no receive, of an old generation, or placed through
    another slot is still counted and never marked; the good rows are."""
    if datapath == "native" and placement.mark_arrivals_native is None:
        pytest.skip("sdr._placement not built")
    previous = placement.use_datapath(datapath)
    try:
        core = sdr.QueuePairCore(ATTR)
        mr = sdr.MemoryRegion(key=1, view=memoryview(bytearray(2 * 40_000)))
        recs = [core.post_recv(0.0, mr, i * 40_000, 4_000) for i in range(2)]
        enc, mms = ATTR.layout.encode, ATTR.max_message_size
        a, b = recs
        unused = next(i for i in range(ATTR.max_messages) if i not in (a.msg_id, b.msg_id))
        rows = [
            (0, a.generation, enc(a.msg_id, 0, 0), 1000, a.slot * mms),  # good
            (0, a.generation, enc(unused, 1, 0), 1000, a.slot * mms + 1000),  # no receive
            (0, (a.generation + 1) % 3, enc(a.msg_id, 2, 0), 1000, a.slot * mms + 2000),  # stale
            (0, a.generation, enc(a.msg_id, 3, 0), 1000, b.slot * mms + 3000),  # b's slot
            (0, b.generation, enc(b.msg_id, 1, 0), 1000, b.slot * mms + 1000),  # good
        ]
        cols = list(zip(*rows, strict=True))
        batch = CompletionBatch(
            np.array(cols[0], np.uint16),
            np.array(cols[1], np.uint8),
            np.array(cols[2], np.uint32),
            np.array(cols[3], np.int64),
            np.array(cols[4], np.int64),
            validated=True,
        )
        core.receive_completions(0.0, batch)
        assert (core.counters.late, core.counters.stale_generation) == (2, 1)
        assert core.counters.packets_accepted == 2
        assert a.bitmap.packets[:4].tolist() == [1, 0, 0, 0]
        assert b.bitmap.packets[:2].tolist() == [0, 1]
    finally:
        placement.use_datapath(previous)
