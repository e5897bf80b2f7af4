"""UDP backend in one process over loopback: bytes land, and bad packets are never written."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from udp_pairs import UdpPair

import sdr
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.roce import encode_packet

ATTR = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB", channels=2)


@pytest.fixture
def pair() -> Iterator[UdpPair]:
    with UdpPair(ATTR) as p:
        yield p


def test_one_shot_write_lands_bit_exact_with_immediate(pair: UdpPair) -> None:
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, 50_001, dtype=np.uint8)
    dst = np.zeros_like(src)
    rh = pair.qb.post_recv(pair.b.register(dst))
    sh = pair.qa.post_send(pair.a.register(src), imm=0x89ABCDEF)
    pair.until(lambda: rh.record.arrived and sh.record.done)
    assert np.array_equal(dst, src)
    assert rh.imm == 0x89ABCDEF and rh.bitmap.all()
    c = pair.qb.counters()
    assert c["packets_accepted"] == 49 and pair.qb.transport_qp.stats["packets_placed"] >= 49
    assert pair.qb.transport_qp.stats["bytes_placed"] == 50_001
    assert c["bad_icrc"] == c["bad_rkey"] == c["late"] == c["out_of_range"] == 0


def test_several_messages_in_order(pair: UdpPair) -> None:
    bufs = [np.full(3000 + i, i + 1, dtype=np.uint8) for i in range(5)]
    outs = [np.zeros_like(b) for b in bufs]
    rhs = [pair.qb.post_recv(pair.b.register(o)) for o in outs]
    shs = [pair.qa.post_send(pair.a.register(b), imm=i) for i, b in enumerate(bufs)]
    pair.until(lambda: all(r.record.arrived for r in rhs) and all(s.record.done for s in shs))
    for i, (b, o) in enumerate(zip(bufs, outs, strict=True)):
        assert np.array_equal(b, o) and rhs[i].imm == i


def _inject(pair: UdpPair, **changes: int) -> bytes:
    """Send one hand-made packet to the receiver: a valid one for slot 0 unless changed."""
    tqp = pair.qb.transport_qp
    gen = pair.qb.core.recv._active[0].generation if pair.qb.core.recv._active else 0
    fields = {
        "qpn": tqp.qpns[gen][0],
        "va": 0,
        "rkey": tqp.rkeys[gen],
        "imm": 0,  # message id 0, packet 0, fragment 0
    }
    fields.update(changes)
    src = ("127.0.0.1", pair.ta.port)
    dst = ("127.0.0.1", pair.tb.port)
    payload = b"\xee" * 1024
    pkt = bytearray(
        encode_packet(
            src, dst, fields["qpn"], 0, fields["va"], fields["rkey"], fields["imm"], payload
        )
    )
    if changes.get("corrupt"):
        pkt[100] ^= 0x40
    pair.ta.data_socket.sendto(bytes(pkt), dst)
    return bytes(pkt)


def test_bad_packets_are_dropped_counted_and_never_written(pair: UdpPair) -> None:
    dst = np.zeros(4096, dtype=np.uint8)
    rh = pair.qb.post_recv(pair.b.register(dst))
    pair.settle()
    gen = rh.record.generation
    tqp = pair.qb.transport_qp
    _inject(pair, corrupt=1)
    _inject(pair, qpn=(tqp.qpns[gen][0] + 1) % (1 << 24) or 5)
    _inject(pair, rkey=tqp.rkeys[gen] ^ 1)
    _inject(pair, va=ATTR.max_message_size * ATTR.max_messages)  # past the key space
    _inject(pair, va=ATTR.max_message_size * 5)  # an unbound slot: late
    other = tqp.qpns[(gen + 1) % ATTR.generations][0]
    _inject(pair, qpn=other, rkey=tqp.rkeys[(gen + 1) % ATTR.generations])  # wrong generation
    pair.ta.data_socket.sendto(b"short", ("127.0.0.1", pair.tb.port))
    pair.settle()
    c = pair.qb.counters()
    assert c["bad_icrc"] == 1
    assert c["udp_unknown_qpn"] == 1 and c["bad_rkey"] == 1
    assert c["out_of_range"] == 1
    assert c["late"] == 2  # unbound slot, and the unbound entry of the other generation
    assert c["udp_runt"] == 1
    assert pair.qb.transport_qp.stats["packets_placed"] == 0 and c["packets_accepted"] == 0
    assert not dst.any()
    unknown_before = c["udp_unknown_qpn"]
    _inject(pair, qpn=0x000001)
    pair.settle()
    assert pair.qb.counters()["udp_unknown_qpn"] == unknown_before + 1
    # a valid packet for the same slot is written
    _inject(pair, imm=rh.record.msg_id << 22)
    pair.settle()
    assert pair.qb.transport_qp.stats["packets_placed"] == 1
    assert (dst[:1024] == 0xEE).all() and not dst[1024:].any()


def test_rate_limit_paces_the_sender() -> None:
    attr = ATTR.replace(
        rate_limit="200Mbit/s", mtu=4096, chunk_size="64KiB", max_message_size="1MiB"
    )
    with UdpPair(attr) as p:
        src = np.ones(1 << 20, dtype=np.uint8)
        dst = np.zeros_like(src)
        rh = p.qb.post_recv(p.b.register(dst))
        sh = p.qa.post_send(p.a.register(src))
        start = p.a.now()
        while not (rh.record.arrived and sh.record.done):
            p.a.progress()
            p.b.progress()
            p.ta.wait(0.001)
        elapsed = p.a.now() - start
        sent_bits = p.qa.transport_qp.stats["wire_bytes_sent"] * 8
        # the bucket allows at most its burst above rate * time; this is a bound on bytes
        burst_bits = p.qa.transport_qp.pacer.burst_bits
        assert sent_bits <= 200e6 * elapsed + burst_bits + 4200 * 8
        assert np.array_equal(src, dst)


def test_wildcard_host_is_refused() -> None:
    with pytest.raises(sdr.TransportError, match="0.0.0.0"):
        UdpTransport(host="0.0.0.0", port=0)
    with pytest.raises(sdr.TransportError, match="IPv4"):
        UdpTransport(host="localhost-ish", port=0)


def test_port_in_use_is_a_transport_error() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(sdr.TransportError, match="cannot open"):
            UdpTransport(port=s.getsockname()[1])
    finally:
        s.close()


def test_icrc_check_can_be_turned_off_but_other_checks_stay() -> None:
    with UdpPair(ATTR, verify_icrc=False) as p:
        dst = np.zeros(4096, dtype=np.uint8)
        rh = p.qb.post_recv(p.b.register(dst))
        p.settle()
        _inject(p, corrupt=1, imm=rh.record.msg_id << 22)  # accepted: nobody checks the ICRC
        _inject(p, rkey=p.qb.transport_qp.rkeys[rh.record.generation] ^ 1)
        p.settle()
        c = p.qb.counters()
        assert c["bad_icrc"] == 0 and c["bad_rkey"] == 1
        assert p.qb.transport_qp.stats["packets_placed"] == 1


def test_pacer_budget_follows_the_rate_limit() -> None:
    attr = ATTR.replace(rate_limit="1Gbit/s")
    t = UdpTransport(port=0)
    try:
        qp = t.create_qp(attr)
        bits = qp.packet_bits
        first = qp.send_budget(1.0)
        assert first * bits <= qp.pacer.burst_bits
        leftover = qp.pacer.burst_bits - first * bits  # less than one packet
        qp.pacer.consume(1.0, first * bits)
        assert qp.send_budget(1.0) == 0
        assert qp.next_send_time(1.0) > 1.0  # a sleeping sender wakes up later
        later = 1.0 + 2**-10  # exactly representable: 976562.5 bits of tokens at 1 Gbit/s
        assert qp.send_budget(later) == int((leftover + 1e9 * 2**-10) // bits)
    finally:
        t.close()


@pytest.mark.parametrize("rate", ["100Mbit/s", "1Gbit/s", "5Gbit/s", "25Gbit/s"])
def test_a_sender_that_wakes_2_ms_late_loses_no_rate(rate: str) -> None:
    """The sender sleeps until a batch may go; the bucket holds that and at least 2 ms
    more, so waking 2 ms late (a busy core) still finds every token."""
    t = UdpTransport(port=0)
    try:
        qp = t.create_qp(ATTR.replace(rate_limit=rate))
        pacer = qp.pacer
        pacer.consume(1.0, qp.send_budget(1.0) * qp.packet_bits)  # empty it
        wake = qp.next_send_time(1.0)
        assert wake > 1.0
        slack = (pacer.burst_bits - pacer._wake_bits) / pacer.rate  # room above a batch
        assert slack >= 0.002
        qp.send_budget(wake + 0.0019)
        assert pacer._tokens < pacer.burst_bits  # nothing was cut off at the cap
        qp.send_budget(wake + slack + 0.001)
        assert pacer._tokens == pacer.burst_bits  # later than that: the cap
    finally:
        t.close()


def test_a_port_in_use_says_to_pass_port_zero() -> None:
    first = UdpTransport(port=0)
    try:
        with pytest.raises(sdr.TransportError, match="port=0"):
            UdpTransport(port=first.port)
    finally:
        first.close()


def test_every_discard_the_receive_path_counts_is_listed() -> None:
    # before, the receive path added ``bad_source`` to a QP's discards on its own, a key
    # the QP's list of wire discards did not have
    from sdr.backends.udp import native
    from sdr.backends.udp.qp import WIRE_DISCARDS

    assert set(native.DISCARDS) <= set(WIRE_DISCARDS)
    t = UdpTransport(host="127.0.0.1", port=0)
    try:
        assert t.create_qp(ATTR).counters()["bad_source"] == 0  # before any connect
    finally:
        t.close()


def test_a_message_that_must_leave_at_once_does_not_wait_for_a_whole_batch() -> None:
    """``send_budget`` waits for a batch (a round's fixed cost shared by many packets);
    ``send_budget_now`` gives what the rate allows at once (a deadline allreduce's note,
    flushed), never more than ``send_budget`` would once the batch is there."""
    t = UdpTransport(port=0)
    try:
        qp = t.create_qp(ATTR.replace(rate_limit="100Mbit/s"))
        qp.pacer.consume(1.0, qp.send_budget(1.0) * qp.packet_bits)  # empty it
        wake = qp.next_send_time(1.0)
        half = 1.0 + (wake - 1.0) / 2  # half a batch of tokens
        assert qp.send_budget(half) == 0
        now_budget = qp.send_budget_now(half)
        assert 0 < now_budget < qp.send_budget(wake)
    finally:
        t.close()


def test_interrupt_ends_a_wait_on_another_thread_and_is_not_lost() -> None:
    """``interrupt`` wakes a ``wait`` in progress (the hierarchical links' progress
    thread sleeps in one while its caller works) and, sent before the wait, makes the
    next one return at once; a spent wake-up does not shorten the wait after it."""
    transport = UdpTransport(port=0)
    try:
        assert transport.can_interrupt
        waited: list[float] = []

        def waiter() -> None:
            start = time.monotonic()
            transport.wait(30.0)
            waited.append(time.monotonic() - start)

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.2)
        transport.interrupt()
        thread.join(timeout=10)
        assert waited and waited[0] < 10  # woken, not timed out
        transport.interrupt()
        transport.interrupt()  # two before the wait: one early return, then a real wait
        start = time.monotonic()
        transport.wait(30.0)
        assert time.monotonic() - start < 10
        start = time.monotonic()
        transport.wait(0.3)
        assert time.monotonic() - start >= 0.25  # the pipe was drained: no stale wake-up
    finally:
        transport.close()
