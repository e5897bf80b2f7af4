"""The chunk checksums in one native call (``sdr._placement.chunk_crcs``) against the
reference, zlib's CRC-32 of each chunk: random messages, chunk sizes and chunk lists
(repeats, any order, a short last chunk, the empty message); every bound refused before
a checksum is written; each CPU implementation (SDR_CRC) gives the same values; and the
receiver's check and the sender's digest agree on either datapath. Then the checksums a
receive keeps per packet: combined, they are the chunks' (native and reference), the
first copy keeps its own, and the check reads only the chunks without one."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdr.placement as placement
from sdr.chunk_bitmap import ReceiveBitmap
from sdr.crc import crc32_combine
from sdr.reliability.geometry import MessageGeometry
from sdr.reliability.integrity import DigestBuilder, DigestStore, chunk_crcs

native = placement.chunk_crcs_native
needs_native = pytest.mark.skipif(native is None, reason="sdr._placement not built")


def _reference(data: bytes, size: int, length: int, chunks: list[int]) -> list[int]:
    return [zlib.crc32(data[c * size : min((c + 1) * size, length)]) for c in chunks]


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_native_matches_zlib_per_chunk(data: st.DataObject) -> None:
    length = data.draw(st.integers(0, 5000))
    size = data.draw(st.integers(1, 1200))
    spare = data.draw(st.integers(0, 64))  # the buffer may be longer than the message
    raw = data.draw(st.binary(min_size=length + spare, max_size=length + spare))
    n_chunks = max(1, -(-length // size))
    chunks = data.draw(st.lists(st.integers(0, n_chunks - 1), max_size=20))
    out = np.zeros(len(chunks), dtype=np.uint32)
    native(raw, size, length, np.array(chunks, dtype=np.int64), out)
    assert out.tolist() == _reference(raw, size, length, chunks)


@needs_native
def test_large_chunks_take_the_folding_paths() -> None:
    raw = np.random.default_rng(7).integers(0, 256, 3 * 65536 + 999, dtype=np.uint8)
    chunks = [3, 0, 2, 1, 3]
    out = np.zeros(len(chunks), dtype=np.uint32)
    native(raw, 65536, len(raw), np.array(chunks, dtype=np.int64), out)
    assert out.tolist() == _reference(raw.tobytes(), 65536, len(raw), chunks)


@needs_native
@pytest.mark.parametrize(
    ("size", "length", "chunks", "error"),
    [
        (100, 1000, [10], ValueError),  # past the last chunk
        (100, 1000, [-1], ValueError),
        (100, 1000, [0, 2**62], ValueError),  # a bad one after a good one: nothing written
        (0, 1000, [0], ValueError),
        (100, 1001, [0], ValueError),  # the message is longer than the data
        (100, -1, [0], ValueError),
    ],
)
def test_native_refuses_bounds_before_writing(size, length, chunks, error) -> None:
    raw = bytes(1000)
    out = np.full(len(chunks), 7, dtype=np.uint32)
    with pytest.raises(error):
        native(raw, size, length, np.array(chunks, dtype=np.int64), out)
    assert (out == 7).all()


@needs_native
def test_native_refuses_ill_typed_arrays() -> None:
    raw = bytes(100)
    with pytest.raises(TypeError):
        native(raw, 10, 100, np.array([0], dtype=np.int32), np.zeros(1, np.uint32))
    with pytest.raises(TypeError):
        native(raw, 10, 100, np.array([0], dtype=np.int64), np.zeros(1, np.int64))
    with pytest.raises(ValueError):
        native(raw, 10, 100, np.array([0, 1], dtype=np.int64), np.zeros(1, np.uint32))
    with pytest.raises(BufferError):  # read-only output
        native(raw, 10, 100, np.array([0], dtype=np.int64), np.zeros(1, np.uint32).tobytes())


@needs_native
@pytest.mark.parametrize("implementation", ["table", "pclmul"])
def test_every_cpu_implementation_gives_the_same_checksums(implementation: str) -> None:
    code = (
        "import numpy as np, zlib; from sdr import _placement as p; "
        "d = np.random.default_rng(3).integers(0, 256, 70001, dtype=np.uint8); "
        "o = np.zeros(2, np.uint32); p.chunk_crcs(d, 65536, len(d), np.array([0, 1]), o); "
        "assert o.tolist() == [zlib.crc32(d[:65536]), zlib.crc32(d[65536:])]"
    )
    env = dict(os.environ, SDR_CRC=implementation)
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


@needs_native
@pytest.mark.parametrize("datapath", ["native", "python"])
def test_the_digest_and_the_check_agree_on_either_datapath(datapath: str) -> None:
    previous = placement.use_datapath(datapath)
    try:
        payload = np.random.default_rng(5).integers(0, 256, 10 * 4096 + 77, dtype=np.uint8)
        geometry = MessageGeometry(len(payload), 4096)
        view = memoryview(payload)
        builder = DigestBuilder(1, view, geometry, scheme=9)
        digests = builder.step(3) + builder.step(100)
        assert builder.done
        assert builder.crcs.tolist() == _reference(
            payload.tobytes(), 4096, len(payload), list(range(geometry.n_chunks))
        )
        store = DigestStore(geometry, 9, "test")
        for piece in digests:
            store.add(piece)
        everything = np.arange(geometry.n_chunks)
        assert store.check(view, everything).all()
        payload[4096 * 3 + 5] ^= 1  # one flipped bit: only its chunk fails
        assert np.flatnonzero(~store.check(view, everything)).tolist() == [3]
        assert chunk_crcs(view, geometry, np.array([], dtype=np.int64)).shape == (0,)
    finally:
        placement.use_datapath(previous)


# --- chunk checksums combined from packet checksums ----------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32_combine_is_the_checksum_of_the_concatenation(a: bytes, b: bytes) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def _marked(length: int, mtu: int, per_chunk: int, seed: int) -> tuple[ReceiveBitmap, bytes]:
    """A bitmap whose packets all arrived, in a random order, each with its checksum."""
    data = np.random.default_rng(seed).bytes(length)
    bitmap = ReceiveBitmap(length, mtu, mtu * per_chunk)
    bitmap.keep_sums()
    for packet in np.random.default_rng(seed + 1).permutation(bitmap.n_packets).tolist():
        assert bitmap.mark_one(packet, zlib.crc32(data[packet * mtu : (packet + 1) * mtu]))
    return bitmap, data


@needs_native
@pytest.mark.parametrize("datapath", ["native", "python"])
@pytest.mark.parametrize(
    ("length", "mtu", "per_chunk"),
    [(10_000, 1000, 4), (10_001, 1000, 4), (7, 3, 2), (4096, 4096, 1)],
)
def test_chunk_sums_are_the_chunks_checksums(datapath, length, mtu, per_chunk) -> None:
    """Combined from the packets' checksums, each chunk's equals zlib's CRC-32 of the
    chunk's bytes (a short last packet included); a chunk with a packet whose checksum
    is not known (or is no CRC-32), or that was reopened, has none (-1)."""
    previous = placement.use_datapath(datapath)
    try:
        bitmap, data = _marked(length, mtu, per_chunk, seed=length)
        every = np.arange(bitmap.n_chunks)
        size = mtu * per_chunk
        assert bitmap.chunk_sums(every).tolist() == _reference(data, size, length, every.tolist())
        bitmap.clear(np.array([0]))
        assert bitmap.chunk_sums(every)[0] == -1 and (bitmap.sums[:per_chunk] == -1).all()
        bitmap.mark_one(0)  # arrived, checksum not known: the chunk must be read
        assert bitmap.chunk_sums(np.array([0])).tolist() == [-1]
        bitmap.sums[-1] = 1 << 33  # not a CRC-32 (a driver's bad value): read, not trusted
        assert bitmap.chunk_sums(np.array([bitmap.n_chunks - 1])).tolist() == [-1]
    finally:
        placement.use_datapath(previous)


@needs_native
def test_the_first_copy_of_a_packet_keeps_its_checksum() -> None:
    bitmap = ReceiveBitmap(2000, 1000, 2000)
    bitmap.keep_sums()
    new, duplicates, done = bitmap.mark(np.array([1, 0, 1]), np.array([5, 6, 7]))
    assert (new, duplicates, done.tolist()) == (2, 1, [0])
    assert bitmap.sums.tolist() == [6, 5]
    assert not bitmap.mark_one(0, 9) and bitmap.sums.tolist() == [6, 5]


@needs_native
@pytest.mark.parametrize(
    ("sums", "per_chunk", "mtu", "length", "chunks"),
    [
        (3, 2, 10, 25, [2]),  # past the last chunk
        (3, 2, 10, 25, [0, -1]),  # a bad one after a good one: nothing written
        (2, 2, 10, 25, [0]),  # fewer sums than packets
        (3, 0, 10, 25, [0]),
        (3, 2, 0, 25, [0]),
    ],
)
def test_chunk_sums_refuses_bounds_before_writing(sums, per_chunk, mtu, length, chunks) -> None:
    out = np.full(len(chunks), 7, dtype=np.int64)
    with pytest.raises(ValueError):
        placement.chunk_sums_native(
            np.zeros(sums, np.int64), per_chunk, mtu, length, np.array(chunks, np.int64), out
        )
    assert (out == 7).all()


@needs_native
@pytest.mark.parametrize("datapath", ["native", "python"])
def test_the_check_trusts_known_sums_and_reads_the_rest(datapath: str) -> None:
    """DigestStore.check compares a chunk with a placed checksum without reading it, and
    reads the chunks without one: a changed byte in a chunk with a good placed checksum
    goes unseen there (the driver's promise), one in a chunk without is caught."""
    previous = placement.use_datapath(datapath)
    try:
        payload = np.random.default_rng(9).integers(0, 256, 4 * 4096, dtype=np.uint8)
        geometry = MessageGeometry(len(payload), 4096)
        view = memoryview(payload)
        builder = DigestBuilder(1, view, geometry, scheme=9)
        store = DigestStore(geometry, 9, "test")
        for piece in builder.step(100):
            store.add(piece)
        payload[5] ^= 1  # chunk 0, which has a placed checksum
        payload[4096 * 2 + 5] ^= 1  # chunk 2, which has none
        sums = builder.crcs.astype(np.int64)
        sums[2] = -1
        sums[3] ^= 1  # a placed checksum that disagrees: the chunk fails unread
        assert store.check(view, np.arange(4), sums).tolist() == [True, True, False, False]
    finally:
        placement.use_datapath(previous)
