"""Multipath chunk books: every path of one SACK gets its own Karn RTT sample."""

from __future__ import annotations

import numpy as np
import pytest

from sdr.reliability.multipath import ChunkPaths

MTU, CHUNK = 1024, 4096  # four packets a chunk


def _send(paths: ChunkPaths, lane: object, chunks: list[int], now: float) -> np.ndarray:
    packets = np.concatenate([np.arange(c * 4, c * 4 + 4) for c in chunks])
    return paths.channels(lane, 16, packets, now)


def test_each_path_of_one_ack_gets_its_own_sample() -> None:
    # before, only the connection's one sample (its newest chunk) reached the selector,
    # so per SACK one path was timed, and the paths' samples came from different moments
    paths = ChunkPaths(3, MTU, CHUNK)
    lane = object()
    channels = _send(paths, lane, [0, 1, 2, 3, 4, 5], now=1.0)
    assert sorted(set(channels.tolist())) == [0, 1, 2]
    paths.delivered(1.05, lane, np.arange(6), 0.05, 5)
    stats = paths.selector.stats
    assert all(s.srtt == pytest.approx(0.05) for s in stats)
    assert [len(s.recent) for s in stats] == [1, 1, 1]


def test_a_chunk_sent_twice_gives_no_sample() -> None:
    paths = ChunkPaths(2, MTU, CHUNK)
    lane = object()
    first = _send(paths, lane, [0, 1], now=1.0)
    _send(paths, lane, [1], now=1.2)  # chunk 1 repaired: Karn's rule
    paths.delivered(1.3, lane, np.array([1]), None, None)
    assert [len(s.recent) for s in paths.selector.stats] == [0, 0]
    paths.delivered(1.3, lane, np.array([0]), None, None)
    timed = paths.selector.stats[int(first[0])]  # chunk 0's first packet
    assert list(timed.recent) == [pytest.approx(0.3)]


def test_the_newest_chunk_of_a_path_times_it() -> None:
    paths = ChunkPaths(1, MTU, CHUNK)
    lane = object()
    _send(paths, lane, [0], now=1.0)
    _send(paths, lane, [1], now=1.5)
    paths.delivered(1.6, lane, np.array([0, 1]), None, None)
    assert list(paths.selector.stats[0].recent) == [pytest.approx(0.1)]
