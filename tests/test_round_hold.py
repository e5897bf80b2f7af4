"""Coalescing rounds: after a round that worked, a QP may leave arrivals in the socket for
a while (a NIC's interrupt moderation). A receiver never longer than the nearest posted
receive needs to finish arriving at the link's rate, nor than the SACK interval; a sender
while its pacer holds its data back (it reads the SACKs when it next sends), never while
it waits for acknowledgements.

Before, the receiver ran one round per batch its peer paced out (one every 2 ms at
1 Gbit/s, ~30 packets each) and the sender one per batch and one per SACK: most of the
CPU per byte was the fixed cost of a round. The values are checked, not the timing."""

from __future__ import annotations

import numpy as np
import pytest
from udp_pairs import UdpPair

import sdr
from sdr.backends.inproc import InprocNetwork
from sdr.reliability.transfers import Incoming
from sdr.runtime import ReliableQP, drive

pytest.importorskip("sdr.backends.udp")

RATE = 1e9
ATTR = sdr.QPAttr(
    mtu=8192, chunk_size="16KiB", max_message_size="4MiB", rate_limit=RATE, channels=1
)


def test_least_to_come_counts_every_lane_against_the_data() -> None:
    inc = Incoming(0, None, 0, 10 * 1000 + 1, (10 * 1000 + 1, 4000))  # type: ignore[arg-type]
    assert inc.least_to_come(1000) == 11 * 1000  # 11 data chunks, none in
    inc.chunks_in = 4  # data or parity: each stands for at most one data chunk
    assert inc.least_to_come(1000) == 7 * 1000
    inc.chunks_in = 15
    assert inc.least_to_come(1000) == 0


def test_the_hold_is_bounded_by_what_the_nearest_receive_still_needs() -> None:
    with UdpPair(ATTR) as pair:
        s = ReliableQP(pair.qa, "sr-nack", rtt="25ms")
        r = ReliableQP(pair.qb, "sr-nack", rtt="25ms")
        assert r.hold() == 0.0  # nothing posted: nothing to coalesce for
        src = np.random.default_rng(3).integers(0, 256, 4 << 20, dtype=np.uint8)
        dst = np.zeros_like(src)
        big = r.post_recv(pair.b.register(dst))
        # a whole 4 MiB receive to come: the SACK interval bounds the hold (2.5 ms)
        assert r.hold() == pytest.approx(r.config.ack_delay)
        assert r.config.ack_delay < (4 << 20) * 8 / RATE
        small = r.post_recv(pair.b.register(np.zeros(16 << 10, np.uint8)))
        # writes go in flight together: the 16 KiB one may finish first (one chunk at
        # 1 Gbit/s, 131 us), so it bounds the hold
        assert r.hold() == pytest.approx((16 << 10) * 8 / RATE)
        r.cancel(small)
        assert r.hold() == pytest.approx(r.config.ack_delay)
        h = s.write(pair.a.register(src))
        drive([s, r], lambda: h.finished and big.finished, 60)
        assert big.done and (dst == src).all()
        assert r.hold() == 0.0  # nothing posted any more


def test_no_hold_where_arrivals_cannot_wait() -> None:
    net = InprocNetwork(seed=1)
    a, b = sdr.Context("inproc", network=net), sdr.Context("inproc", network=net)
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    qa.connect(qb.info())
    qb.connect(qa.info())
    r = ReliableQP(qb, "sr-nack", rtt="25ms")
    r.post_recv(b.register(np.zeros(1 << 20, np.uint8)))
    assert r.hold() == 0.0  # the in-process wire delivers into the QP: nothing to hold


def test_drive_holds_instead_of_waking_for_each_batch() -> None:
    """A paced 16 MiB transfer: the loop holds (sleeps with arrivals left in the socket)
    instead of waking for each of the sender's batches, never longer than the SACK
    interval."""
    with UdpPair(ATTR) as pair:
        s = ReliableQP(pair.qa, "sr-nack", rtt="25ms")
        r = ReliableQP(pair.qb, "sr-nack", rtt="25ms")
        held: list[float] = []
        hold = pair.tb.hold

        def counted(seconds: float) -> None:
            held.append(seconds)
            hold(seconds)

        pair.tb.hold = counted  # type: ignore[method-assign]
        src = np.random.default_rng(4).integers(0, 256, 16 << 20, dtype=np.uint8)
        dst = np.zeros_like(src)
        pieces = range(0, len(src), 4 << 20)
        handles = [r.post_recv(pair.b.register(dst[i : i + (4 << 20)])) for i in pieces]
        writes = [s.write(pair.a.register(src[i : i + (4 << 20)])) for i in pieces]
        # both in one loop (one process, two transports): drive knows the sender's pacer
        # (before, the sender ran only from the receiver's condition, and a receiver that
        # woke less than a batch after the sender's last one found nothing sent and then
        # slept to its next timer: 60 s, once batches were 4 ms)
        drive([r, s], lambda: all(h.finished for h in handles + writes), 60)
        assert all(h.done for h in handles) and (dst == src).all()
        assert held, "the receiver never held"
        assert max(held) <= r.config.ack_delay + 1e-9


def test_a_paced_sender_holds_until_its_next_batch_and_no_longer_once_drained() -> None:
    """While the pacer holds queued data back, SACKs can wait for the next batch (read in
    that round); once nothing waits for the pacer (the last ACKs are what is left), a
    sender must read them at once: no hold."""
    with UdpPair(ATTR) as pair:
        s = ReliableQP(pair.qa, "sr-nack", rtt="25ms")
        r = ReliableQP(pair.qb, "sr-nack", rtt="25ms")
        assert s.hold() == 0.0  # nothing in flight
        src = np.random.default_rng(5).integers(0, 256, 4 << 20, dtype=np.uint8)
        r.post_recv(pair.b.register(np.zeros_like(src)))
        h = s.write(pair.a.register(src))
        seen = []
        while not h.finished:
            s.progress()
            r.progress()
            if s.connection.backlogged:
                # the pacer's wait shrinks as time passes: the hold lies between the waits
                # read just before and just after it (a preempted test saw 0.4 ms of hold
                # against a 2.4 ms wait read earlier)
                before = s.qp.pacer_wait()
                if before:
                    held = s.hold()
                    seen.append((held, before, s.qp.pacer_wait()))
            elif s.connection.in_flight:
                assert s.hold() == 0.0  # waiting for acknowledgements: read them at once
        assert seen, "the sender never waited for its pacer"
        for held, before, after in seen:
            assert after - 1e-3 <= held <= before + 1e-3
