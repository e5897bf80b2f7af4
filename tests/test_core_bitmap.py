import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdr.chunk_bitmap import ReceiveBitmap, bitmap_chunk_expand
from sdr.errors import ConfigError


def test_chunk_bit_set_only_when_all_packets_arrived():
    bm = ReceiveBitmap(length=10_000, mtu=1000, chunk_size=4000)  # 10 packets, 3 chunks
    assert (bm.n_packets, bm.n_chunks) == (10, 3)
    new, dup, done = bm.mark(np.array([0, 1, 2]))
    assert (new, dup, done.tolist()) == (3, 0, [])
    new, dup, done = bm.mark(np.array([3, 3, 8, 9]))
    assert (new, dup, sorted(done.tolist())) == (3, 1, [0, 2])  # last chunk has 2 packets
    assert bm.view().tolist() == [True, False, True]
    assert bm.missing_chunks().tolist() == [1]
    assert not bm.complete
    bm.mark(np.arange(4, 8))
    assert bm.complete


def test_view_is_read_only():
    bm = ReceiveBitmap(8192, 1024, 4096)
    with pytest.raises(ValueError):
        bm.view()[0] = True


def test_expected_lengths_last_packet_short():
    bm = ReceiveBitmap(2500, 1000, 1000)
    assert bm.expected_lengths(np.array([0, 1, 2])).tolist() == [1000, 1000, 500]


def test_zero_length_receive_is_complete():
    assert ReceiveBitmap(0, 1024, 4096).complete


@given(
    st.integers(1, 50_000),
    st.sampled_from([512, 1000, 4096]),
    st.integers(1, 8),
    st.lists(st.integers(0, 10_000), max_size=300),
)
def test_bitmap_matches_reference(length, mtu, per_chunk, arrivals):
    bm = ReceiveBitmap(length, mtu, mtu * per_chunk)
    arrivals = [a for a in arrivals if a < bm.n_packets]
    seen = set()
    for start in range(0, len(arrivals), 7):  # several batches
        batch = np.array(arrivals[start : start + 7], dtype=np.int64)
        new, dup, _ = bm.mark(batch)
        fresh = set(batch.tolist()) - seen
        assert new == len(fresh)
        assert dup == len(batch) - len(fresh)
        seen |= fresh
    expected = [all(p in seen for p in range(c * per_chunk, min((c + 1) * per_chunk, bm.n_packets)))
                for c in range(bm.n_chunks)]  # fmt: skip
    assert bm.view().tolist() == expected


def test_bitmap_chunk_expand():
    ranges = bitmap_chunk_expand([0, 2], chunk_size=4096, length=10_000)
    assert ranges.tolist() == [[0, 4096], [8192, 10_000]]
    mask = np.array([False, True, False])
    assert bitmap_chunk_expand(mask, 4096, 10_000).tolist() == [[4096, 8192]]
    with pytest.raises(ConfigError, match="out of range"):
        bitmap_chunk_expand([3], 4096, 10_000)


def test_memory_grows_with_the_receive_not_the_limits():
    small, big = ReceiveBitmap(4096, 4096, 65536), ReceiveBitmap(64 << 20, 4096, 65536)
    assert small.nbytes() < 64
    assert big.nbytes() < 32 << 10  # 64 MiB at 4 KiB MTU: ~21 KiB of state


def test_packet_runs_merge_consecutive_chunks():
    bm = ReceiveBitmap(length=10 * 4096 + 100, mtu=1024, chunk_size=4096)  # 11 chunks, 41 packets
    assert bm.packet_runs(np.array([3, 1, 2, 7, 10, 10, -1, 11])) == [(4, 16), (28, 32), (40, 41)]
    assert bm.packet_runs(np.array([], dtype=np.int64)) == []


@given(
    n_chunks=st.integers(1, 40),
    picks=st.lists(st.integers(-3, 45), max_size=60),
)
def test_packet_runs_cover_what_packet_range_covers(n_chunks, picks):
    # the seal is one action per run: it must refuse exactly the packets the per-chunk
    # ranges named, no more (a neighbour's packets stay open), no fewer
    bm = ReceiveBitmap(length=n_chunks * 4096 - 700, mtu=1024, chunk_size=4096)
    chunks = np.array(picks, dtype=np.int64)

    def covered(ranges):
        mask = np.zeros(bm.n_packets, dtype=bool)
        for start, stop in ranges:
            assert 0 <= start < stop <= bm.n_packets
            mask[start:stop] = True
        return mask

    runs = bm.packet_runs(chunks)
    assert np.array_equal(covered(runs), covered(bm.packet_range(chunks)))
    assert all(a[1] < b[0] for a, b in zip(runs, runs[1:], strict=False))  # apart, in order
