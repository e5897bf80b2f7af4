"""The Selective Repeat receiver's reorder window: overtaken chunks are not NACKed twice.

Fed by hand (no wire): chunk arrivals out of order, with ``now``; the NACKs come out as
the machine's actions.
"""

from __future__ import annotations

import numpy as np

from sdr.reliability import ReliabilityConfig, create_scheme
from sdr.reliability.base import Lane, SendMessage
from sdr.reliability.messages import Nack

RTT = 0.025
CHUNK = 4096


def _receiver(n_chunks: int = 64):
    scheme = create_scheme(ReliabilityConfig(scheme="sr-nack", rtt=RTT, chunk_size=CHUNK))
    return scheme.receiver(0, memoryview(bytearray(n_chunks * CHUNK)))


def _nacked(machine) -> list[int]:
    out: list[int] = []
    for action in machine.actions():
        if isinstance(action, SendMessage) and isinstance(action.message, Nack):
            out += action.message.chunks().tolist()
    return out


def _arrive(machine, now: float, *chunks: int) -> list[int]:
    machine.on_chunks(now, Lane.DATA, np.array(chunks, dtype=np.int64))
    return _nacked(machine)


def test_a_fifo_path_nacks_a_hole_at_once() -> None:
    rx = _receiver()
    assert _arrive(rx, 0.0, 0) == []
    assert _arrive(rx, 0.001, 2) == [1]  # no reordering seen: the window is 0
    assert rx.reorder_window == 0.0


def test_reordering_seen_once_widens_the_window_and_stops_the_nacks() -> None:
    rx = _receiver()
    _arrive(rx, 0.0, 0)
    assert _arrive(rx, 0.001, 2) == [1]  # the first overtaking costs one NACK
    _arrive(rx, 0.004, 1)  # ... but chunk 1 was only 3 ms late: its first copy
    assert abs(rx.reorder_window - 1.25 * 0.003) < 1e-9
    # the same skew again: no NACK (before the window it was NACKed every time)
    assert _arrive(rx, 0.010, 4) == []
    assert _arrive(rx, 0.013, 3) == []
    assert rx.stats.get("nacked_chunks", 0) == 1


def test_a_real_loss_is_still_nacked_when_its_window_ends() -> None:
    rx = _receiver()
    _arrive(rx, 0.0, 0, 2)
    _arrive(rx, 0.004, 1)  # learn 5 ms
    assert _arrive(rx, 0.010, 4) == []  # chunk 3 may be overtaken ...
    due = 0.010 + rx.reorder_window
    rx.handle_timer(due - 1e-4)
    assert _nacked(rx) == []
    assert rx.next_timer() == due  # the SACK went out: the window's end is next
    rx.handle_timer(due)
    assert _nacked(rx) == [3]  # ... it did not come: lost, NACKed by the timer


def test_a_repair_does_not_count_as_reordering() -> None:
    rx = _receiver()
    _arrive(rx, 0.0, 0)
    assert _arrive(rx, 0.001, 2) == [1]
    _arrive(rx, 0.001 + RTT, 1)  # the retransmission, one RTT after the NACK
    assert rx.reorder_window == 0.0


def test_the_window_is_at_most_one_rtt() -> None:
    rx = _receiver()
    _arrive(rx, 0.0, 0, 2)
    rx.last_nack[:] = -np.inf  # as if chunk 1 had never been NACKed
    _arrive(rx, 0.5, 1)
    assert rx.reorder_window == RTT


def test_multipath_starts_with_an_eighth_of_the_rtt() -> None:
    config = ReliabilityConfig(scheme="sr-nack", rtt=RTT, chunk_size=CHUNK, multipath=True)
    rx = create_scheme(config).receiver(0, memoryview(bytearray(64 * CHUNK)))
    _arrive(rx, 0.0, 0)
    assert _arrive(rx, 0.001, 2) == []  # paths reorder: wait before NACKing chunk 1
    assert rx.reorder_window == RTT / 8
