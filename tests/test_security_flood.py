"""Control-message floods from the peer's own address stay bounded (UDP backend, loopback).

The flood comes from the right address and carries the right control id, so it passes
the transport's checks and reaches the SDR core and the reliable QP: messages for the
application (capped), reliability messages for messages that do not exist (stale),
clear-to-sends outside the look-ahead window, and damaged messages. Nothing may grow
without bound, and a real message must still get through afterwards.
"""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import sdr
from sdr.backends.udp import UdpTransport
from sdr.control import CTS
from sdr.reliability.messages import Ack, Probe, Sack
from sdr.runtime import ReliableQP
from sdr.runtime.handles import wait_all

ATTR = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="1MiB", max_messages=16)
PER_KIND = 3000
BURST = 100


def _flood_messages() -> dict[str, list[bytes]]:
    forged_sack = Sack(7, 1 << 31, np.ones(64, dtype=bool), True).encode()
    damaged = bytearray(Ack(0).encode())
    damaged[-1] ^= 0xFF
    return {
        "application": [bytes([200]) + i.to_bytes(4, "big") for i in range(PER_KIND)],
        "stale": [
            (Ack(10_000 + i) if i % 3 else Probe(20_000 + i)).encode() for i in range(PER_KIND)
        ],
        "huge_sack": [forged_sack] * PER_KIND,  # claims 2^31 chunks of a message not in flight
        "cts_out_of_window": [CTS(1000 + i, 0, 0, 0, 4096).encode() for i in range(PER_KIND)],
        "damaged": [bytes(damaged)] * PER_KIND,
    }


@contextmanager
def _reliable_pair() -> Iterator[tuple[sdr.Context, sdr.Context, ReliableQP, ReliableQP]]:
    """Two UDP contexts on loopback with one connected SR QP pair."""
    ta, tb = UdpTransport(port=0), UdpTransport(port=0)
    with sdr.Context(backend=ta) as a, sdr.Context(backend=tb) as b:
        qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
        qa.connect(qb.info())
        qb.connect(qa.info())
        yield a, b, ReliableQP(qa, "sr-rto", rtt="1ms"), ReliableQP(qb, "sr-rto", rtt="1ms")


def test_control_flood_is_bounded_and_the_connection_still_works() -> None:
    with _reliable_pair() as (a, b, ra, rb):
        qa, qb, ta, tb = ra.qp, rb.qp, a.transport, b.transport
        peer, cid = qa.transport_qp.peer_control, qa.transport_qp.peer_control_id
        flood = [m for kind in _flood_messages().values() for m in kind]
        assert zlib.crc32(b"".join(flood)) != 0
        tracemalloc.start()
        try:
            baseline = None
            for start in range(0, len(flood), BURST):
                for message in flood[start : start + BURST]:
                    ta.send_control(peer, cid, message)
                for _ in range(3):
                    rb.progress()
                if baseline is None:
                    baseline = tracemalloc.get_traced_memory()[0]
            for _ in range(10):
                rb.progress()
            grown = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
        c, core = rb.counters, qb.counters()
        assert len(rb.unhandled_control) == 1024
        assert c["control_dropped"] == PER_KIND - 1024
        assert c["control_stale"] == 2 * PER_KIND  # ACKs, PROBEs and SACKs of nothing
        assert c["control_malformed"] == PER_KIND  # damaged: checksum fails
        assert core["control_malformed"] == PER_KIND  # CTS outside the look-ahead window
        assert len(qb.core.send._cts) == 0
        assert qb.transport_qp.control_in == type(qb.transport_qp.control_in)()
        assert grown < 1 << 20, f"{grown} bytes retained after a flood of {len(flood)} messages"
        assert tb.transport_counters()["control_bad_source"] == 0
        # the connection still works
        src = np.random.default_rng(1).integers(0, 256, 300_000, dtype=np.uint8)
        dst = np.zeros_like(src)
        handles = [ra.write(a.register(src)), rb.post_recv(b.register(dst))]
        wait_all(handles, timeout=30)
        assert np.array_equal(src, dst)


def test_forged_sack_for_a_message_in_flight_is_clipped_to_the_message() -> None:
    """A SACK claiming 2^25 chunks for a live write: no gigabyte index arrays, and the
    write still completes only on the receiver's real ACK with the right bytes."""
    with _reliable_pair() as (a, b, ra, rb):
        qb, tb = rb.qp, b.transport
        src = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8)
        dst = np.zeros_like(src)
        w = ra.write(a.register(src))
        r = rb.post_recv(b.register(dst))
        while not ra.connection.writes.sending[0].started:
            ra.progress()
            rb.progress()
        forged = Sack(0, 1 << 25, np.ones(4000, dtype=bool), True).encode()  # 256 MiB of indices
        tracemalloc.start()
        try:
            for _ in range(20):
                tb.send_control(
                    qb.transport_qp.peer_control, qb.transport_qp.peer_control_id, forged
                )
            for _ in range(5):
                ra.progress()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20
        assert ra.counters["received_sack"] >= 20
        wait_all([w, r], timeout=30)
        assert w.done and r.done and np.array_equal(src, dst)
