"""Fuzz target for the native arrival marking: ``sdr._placement.mark_arrivals`` against a
plain-Python statement of its rules.

``arrivals_native`` turns the fuzz input into one receive's bitmaps (packets, chunk
counts, expected counts, immediate fragments; some already partly set) and rows of
(packet offset, fragment value, length) with edge offsets (negative, one past the end,
huge) and immediate-only rows. A batch with an offset outside the receive must raise
ValueError having written nothing; any other batch must give the reference's counts,
completed chunks and arrays exactly.
"""

from __future__ import annotations

import numpy as np
from registry import Reader, target

from sdr.placement import mark_arrivals_native

__all__ = ["fuzz_arrivals_native"]

EDGES = (-1, -(1 << 63), (1 << 63) - 1, 1 << 32)


def reference(state: list[np.ndarray], offsets, values, lengths, per_chunk: int):
    """The rules of RecvTable._apply, row by row, over copies of ``state``."""
    packets, counts, expected, chunks, have, fragments = (a.copy() for a in state)
    fresh = dup = imm_only = 0
    done = []
    for p, v, n in zip(offsets.tolist(), values.tolist(), lengths.tolist(), strict=True):
        if p < 0 or (n != 0 and p >= len(packets)):
            return None
        if n == 0:
            imm_only += 1
        elif packets[p]:
            dup += 1
        else:
            packets[p], fresh = True, fresh + 1
            c = p // per_chunk
            counts[c] += 1
            if counts[c] == expected[c]:
                chunks[c] = True
                done.append(c)
        f = p % len(have)
        if not have[f]:
            have[f], fragments[f] = True, v
    return (fresh, dup, imm_only, sorted(done)), [
        packets,
        counts,
        expected,
        chunks,
        have,
        fragments,
    ]


@target("arrivals_native")
def fuzz_arrivals_native(data: bytes) -> None:
    """mark_arrivals against the reference on fuzzed bitmaps and rows."""
    if mark_arrivals_native is None:
        return
    r = Reader(data)
    per_chunk, n_packets, n_frag = 1 + r.u8() % 8, r.u8() % 64, 1 + r.u8() % 8
    n_chunks = -(-n_packets // per_chunk)
    packets = np.zeros(n_packets, bool)
    counts = np.zeros(n_chunks, np.uint32)
    expected = np.full(n_chunks, per_chunk, np.uint32)
    if n_chunks:
        expected[-1] = n_packets - (n_chunks - 1) * per_chunk
    for p in range(n_packets):  # some packets arrived before this batch
        if not r.empty and r.u8() < 64:
            packets[p] = True
            counts[p // per_chunk] += 1
    chunks = counts == expected
    have = np.zeros(n_frag, bool)
    fragments = np.zeros(n_frag, np.uint32)
    rows = r.u8() % 64
    offsets = np.zeros(rows, np.int64)
    for i in range(rows):
        pick = r.u8() if not r.empty else 0
        offsets[i] = EDGES[pick % len(EDGES)] if pick >= 250 else pick % (n_packets + 2)
    values = np.array([r.u32() if not r.empty else 0 for _ in range(rows)], np.uint32)
    lengths = np.array(
        [0 if (not r.empty and r.u8() < 32) else 1000 for _ in range(rows)], np.int64
    )
    state = [packets, counts, expected, chunks, have, fragments]
    want = reference(state, offsets, values, lengths, per_chunk)
    before = [a.copy() for a in state]
    try:
        got = mark_arrivals_native(*state, offsets, values, lengths, per_chunk)
    except ValueError:
        assert want is None, "native refused a batch the reference accepts"
        assert all((a == b).all() for a, b in zip(state, before, strict=True)), "wrote first"
        return
    assert want is not None, "native accepted an offset outside the receive"
    (fresh, dup, imm_only, done), arrays = want
    assert got[:3] == (fresh, dup, imm_only), (got, want[0])
    assert got[3].dtype == np.int64 and got[3].tolist() == done, (got[3], done)
    assert all((a == b).all() for a, b in zip(state, arrays, strict=True)), "arrays differ"
