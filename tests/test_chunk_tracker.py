"""The sender's chunk tracker keeps its earliest RTO, and whether any chunk is queued,
without rescanning each time it is asked, and must still agree with a scan after any
sequence of queue / sent / arm / ack."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sdr.reliability.chunk_tracker import ChunkTracker

N = 12
chunk_sets = st.lists(st.integers(0, N - 1), max_size=N).map(lambda c: np.array(c, np.int64))
ops = st.lists(
    st.tuples(
        st.sampled_from(["queue", "sent", "sent_unarmed", "arm", "ack", "unack", "ask"]),
        chunk_sets,
        st.floats(0.0, 10.0),
        st.floats(0.001, 5.0),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_earliest_deadline_matches_a_scan_after_any_sequence(seq: list) -> None:
    tracker = ChunkTracker(N)
    for op, chunks, now, rto in seq:
        if op == "queue":
            tracker.queue(chunks)
        elif op == "sent":
            tracker.sent(now, chunks, rto)
        elif op == "sent_unarmed":
            tracker.sent(now, chunks, None)
        elif op == "arm":
            tracker.arm(now, chunks, rto)
        elif op == "ack":
            tracker.ack(chunks)
        elif op == "unack":
            tracker.unack(chunks)
        assert tracker.next_deadline() == float(tracker.deadline.min())
        assert tracker.any_queued() == bool(tracker.queued.any())


def test_an_ack_of_the_earliest_chunk_moves_the_deadline_to_the_next() -> None:
    tracker = ChunkTracker(3)
    tracker.sent(0.0, np.array([0]), 1.0)
    tracker.sent(0.5, np.array([1, 2]), 1.0)
    assert tracker.next_deadline() == 1.0
    tracker.ack(np.array([0]))
    assert tracker.next_deadline() == 1.5
    tracker.sent(2.0, np.array([1]), 1.0)  # re-armed later: chunk 2 is now the earliest
    assert tracker.next_deadline() == 1.5
    tracker.ack(np.array([2]))
    assert tracker.next_deadline() == 3.0
    tracker.ack(np.array([1]))
    assert tracker.next_deadline() == np.inf
