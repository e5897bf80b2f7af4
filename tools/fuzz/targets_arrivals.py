"""Fuzz targets for the native arrival marking (``sdr._placement.mark_arrivals``) and the
chunk checksums combined from packet checksums (``sdr._placement.chunk_sums``), each
against a plain-Python statement of its rules.

``arrivals_native`` turns the fuzz input into one receive's bitmaps (packets, chunk
counts, expected counts, immediate fragments; some already partly set) and rows of
(packet offset, fragment value, length) with edge offsets (negative, one past the end,
huge) and immediate-only rows, and, for half the inputs, a payload checksum per row
(some unknown) with the receive's kept checksums. A batch with an offset outside the
receive must raise ValueError having written nothing; any other batch must give the
reference's counts, completed chunks and arrays exactly.

``chunk_sums_native`` draws packet checksums (unknown, out-of-range and real ones), a
receive's geometry and a chunk list (with chunks outside it): the native combination
must equal :func:`sdr.crc.crc32_combine` over each chunk's packets, and refuse a list
with a chunk outside the receive having written nothing.
"""

from __future__ import annotations

import numpy as np
from registry import Reader, target

from sdr.crc import crc32_combine
from sdr.placement import chunk_sums_native, mark_arrivals_native

__all__ = ["fuzz_arrivals_native", "fuzz_chunk_sums_native"]

EDGES = (-1, -(1 << 63), (1 << 63) - 1, 1 << 32)


def reference(state: list[np.ndarray], offsets, values, lengths, per_chunk: int, crcs=None):
    """The rules of RecvTable._apply, row by row, over copies of ``state`` (with
    ``crcs``, its last array is the kept checksums: a new packet keeps its row's)."""
    packets, counts, expected, chunks, have, fragments = (a.copy() for a in state[:6])
    sums = state[6].copy() if crcs is not None else None
    fresh = dup = imm_only = 0
    done = []
    for i, (p, v, n) in enumerate(
        zip(offsets.tolist(), values.tolist(), lengths.tolist(), strict=True)
    ):
        if p < 0 or (n != 0 and p >= len(packets)):
            return None
        if n == 0:
            imm_only += 1
        elif packets[p]:
            dup += 1
        else:
            packets[p], fresh = True, fresh + 1
            if sums is not None:
                sums[p] = crcs[i]
            c = p // per_chunk
            counts[c] += 1
            if counts[c] == expected[c]:
                chunks[c] = True
                done.append(c)
        f = p % len(have)
        if not have[f]:
            have[f], fragments[f] = True, v
    arrays = [packets, counts, expected, chunks, have, fragments]
    return (fresh, dup, imm_only, sorted(done)), arrays + ([] if sums is None else [sums])


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
    crcs = None
    if not r.empty and r.u8() & 1:  # checksums: per row, and kept per packet
        crcs = np.array([_checksum(r) for _ in range(rows)], np.int64)
        drawn = np.array([_checksum(r) for _ in range(n_packets)], np.int64)
        state.append(np.where(packets, drawn, -1).astype(np.int64))
    want = reference(state, offsets, values, lengths, per_chunk, crcs)
    before = [a.copy() for a in state]
    try:
        extra = () if crcs is None else (crcs, state[6])
        got = mark_arrivals_native(*state[:6], offsets, values, lengths, per_chunk, *extra)
    except ValueError:
        assert want is None, "native refused a batch the reference accepts"
        assert all((a == b).all() for a, b in zip(state, before, strict=True)), "wrote first"
        return
    assert want is not None, "native accepted an offset outside the receive"
    (fresh, dup, imm_only, done), arrays = want
    assert got[:3] == (fresh, dup, imm_only), (got, want[0])
    assert got[3].dtype == np.int64 and got[3].tolist() == done, (got[3], done)
    assert all((a == b).all() for a, b in zip(state, arrays, strict=True)), "arrays differ"


def _checksum(r: Reader) -> int:
    """A packet checksum: mostly a real CRC-32, sometimes unknown (-1)."""
    return -1 if not r.empty and r.u8() < 32 else r.u32() if not r.empty else 0


@target("chunk_sums_native")
def fuzz_chunk_sums_native(data: bytes) -> None:
    """chunk_sums against crc32_combine over fuzzed packet checksums and chunk lists."""
    if chunk_sums_native is None:
        return
    r = Reader(data)
    mtu, per_chunk = 1 + r.u8() % 16, 1 + r.u8() % 8
    length = r.u8() % 200
    n_packets = -(-length // mtu)
    n_chunks = -(-n_packets // per_chunk)
    sums = np.array(
        [(1 << 32) + 5 if not r.empty and r.u8() < 8 else _checksum(r) for _ in range(n_packets)],
        np.int64,
    )
    chunks = np.array(
        [(r.u8() if not r.empty else 0) % (n_chunks + 2) - 1 for _ in range(r.u8() % 16)],
        np.int64,
    )
    out = np.full(len(chunks), 7, np.int64)
    if ((chunks < 0) | (chunks >= n_chunks)).any():
        try:
            chunk_sums_native(sums, per_chunk, mtu, length, chunks, out)
        except ValueError:
            assert (out == 7).all(), "wrote before refusing"
            return
        raise AssertionError("native accepted a chunk outside the receive")
    chunk_sums_native(sums, per_chunk, mtu, length, chunks, out)
    for i, chunk in enumerate(chunks.tolist()):
        parts = sums[chunk * per_chunk : min((chunk + 1) * per_chunk, n_packets)].tolist()
        want = -1
        if all(0 <= part < 1 << 32 for part in parts):
            want = parts[0]
            for packet, part in enumerate(parts[1:], start=chunk * per_chunk + 1):
                want = crc32_combine(want, part, min(mtu, length - packet * mtu))
        assert out[i] == want, (chunk, parts, out[i], want)
