"""A plain send has a deadline for its clear-to-send: it fails instead of waiting forever.

The core is sans-I/O: the deadline runs on the ``now`` it is fed (a ManualClock here),
never on a clock of its own. A one-shot ``post_send`` that hears no CTS (the peer never
posted the matching receive) within ``cts_timeout`` (default
:data:`sdr.send_table.DEFAULT_CTS_TIMEOUT`) fails with ``sdr.TimeoutError`` naming the send
and what it waited for; its send slot is freed and later messages still match by order.
Streams (the reliable layer's lanes, which have their own timers) have no CTS deadline
unless one is asked for.
"""

from __future__ import annotations

import numpy as np
import pytest
from sdr_pairs import make_pair, random_bytes

import sdr
from sdr.send_table import DEFAULT_CTS_TIMEOUT, SendState
from sdr.transport import MemoryRegion

ATTR = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB", max_messages=4)


def _advance(pair, seconds: float, rounds: int = 4) -> None:  # type: ignore[no-untyped-def]
    for _ in range(rounds):
        pair.clock.advance(seconds / rounds)
        pair.a.progress()
        pair.b.progress()


def test_default_deadline_fails_a_send_whose_receive_is_never_posted() -> None:
    assert 1.0 <= DEFAULT_CTS_TIMEOUT <= 600.0
    p = make_pair(ATTR)
    sh = p.qa.post_send(p.a.register(random_bytes(5000)))
    _advance(p, DEFAULT_CTS_TIMEOUT * 0.9)
    assert sh.poll() is False  # still waiting
    _advance(p, DEFAULT_CTS_TIMEOUT * 0.2)
    with pytest.raises(sdr.TimeoutError, match=r"send 0 .*no clear-to-send.*receive") as err:
        sh.poll()
    assert f"{DEFAULT_CTS_TIMEOUT:g} s" in str(err.value)
    assert sh.record.state is SendState.FAILED and sh.record.packets_sent == 0
    assert p.qa.core.send.in_flight == 0  # its send slot is free again


def test_deadline_per_send_and_later_messages_still_match_in_order() -> None:
    p = make_pair(ATTR)
    src = random_bytes(5000, seed=4)
    first = p.qa.post_send(p.a.register(random_bytes(5000)), cts_timeout=0.5)
    _advance(p, 0.4)
    assert first.poll() is False
    _advance(p, 0.2)
    with pytest.raises(sdr.TimeoutError, match="within 0.5 s"):
        first.poll()
    # the failed send used sequence number 0: the receiver's receive 0 gets nothing and
    # receive 1 matches send 1
    dst0, dst1 = np.zeros(5000, np.uint8), np.zeros(5000, np.uint8)
    r0, r1 = p.qb.post_recv(p.b.register(dst0)), p.qb.post_recv(p.b.register(dst1))
    second = p.qa.post_send(p.a.register(src), imm=3)
    p.pump(200)
    assert second.poll() and r1.record.arrived and np.array_equal(dst1, src) and r1.imm == 3
    assert not r0.record.arrived and not dst0.any()


def test_a_send_that_got_its_cts_in_time_is_not_failed_later() -> None:
    p = make_pair(ATTR)
    dst = np.zeros(5000, np.uint8)
    p.qb.post_recv(p.b.register(dst))
    p.pump(5)  # the CTS arrives
    assert p.qa.core.counters.cts_received == 1
    src = random_bytes(5000, seed=5)
    sh = p.qa.post_send(p.a.register(src), cts_timeout=0.001)
    _advance(p, 10.0)
    assert sh.poll() and np.array_equal(dst, src)


def test_no_deadline_when_disabled_and_for_streams_by_default() -> None:
    p = make_pair(ATTR)
    plain = p.qa.post_send(p.a.register(random_bytes(100)), cts_timeout=None)
    stream = p.qa.send_stream()
    _advance(p, 10 * DEFAULT_CTS_TIMEOUT)
    assert plain.poll() is False and stream.poll() is False
    for bad in (0, -1.0, float("nan"), float("inf"), "5s", True):
        with pytest.raises(sdr.ConfigError, match="cts_timeout"):
            p.qa.post_send(p.a.register(random_bytes(100)), cts_timeout=bad)  # type: ignore[arg-type]


def test_core_deadline_runs_on_the_now_it_is_fed_even_without_budget() -> None:
    core = sdr.QueuePairCore(ATTR)
    mr = MemoryRegion(key=1, view=memoryview(bytearray(4096)))
    rec = core.post_send(10.0, mr, cts_timeout=2.0)
    assert core.writes_to_send(11.9, 100) == [] and rec.state is SendState.QUEUED
    assert core.writes_to_send(12.0, 0) == []  # no budget: the deadline still applies
    assert rec.state is SendState.FAILED and isinstance(rec.error, sdr.TimeoutError)
    assert "send 0 (4096 bytes)" in str(rec.error)
    stream = core.stream_start(0.0, cts_timeout=1.0)
    core.writes_to_send(0.5, 100)
    assert stream.state is SendState.QUEUED
    core.writes_to_send(1.0, 100)
    assert stream.state is SendState.FAILED
