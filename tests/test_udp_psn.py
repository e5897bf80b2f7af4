"""A UDP QP's packet sequence numbers: per (generation, channel), 24 bits, and the
numbers of packets that never left are taken again by the next ones (no gap on the wire)."""

from __future__ import annotations

import numpy as np

from sdr.backends.udp.psn import PSN_MASK, PsnCounters


def test_channels_count_apart_and_wrap_at_24_bits() -> None:
    psns = PsnCounters(generations=2, channels=2)
    psns.next[1][1] = PSN_MASK - 1
    got = psns.take(1, np.array([1, 0, 1, 1, 0]))
    assert got.tolist() == [PSN_MASK - 1, 0, PSN_MASK, 0, 1]
    assert psns.next == [[0, 0], [2, 1]]


def test_what_did_not_leave_is_numbered_again() -> None:
    psns = PsnCounters(generations=1, channels=3)
    channels = np.array([0, 1, 2, 0, 1, 2, 0])
    first = psns.take(0, channels)
    sent = 4  # the kernel took the first four
    psns.give_back(0, channels[sent:])
    again = psns.take(0, channels[sent:])
    assert again.tolist() == first[sent:].tolist()
    assert psns.next == [[3, 2, 2]]
