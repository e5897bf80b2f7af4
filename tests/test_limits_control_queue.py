"""Limits that network input must not get around: control queues, QPN space, per-QP cost.

- Every control queue fed from the network is bounded (tail drop, like a NIC's receive
  queue) and counts what it dropped as ``control_dropped``: the core's queue for the
  layer above (a plain SDR QP whose application never calls ``poll_control``), the UDP
  transport's per-QP queue, the in-process wire's, and one ``poll_control`` call reads
  a bounded number of datagrams (offload, UDP). SDR's own CTS still flows when the
  application's queue is full.
- A full QPN space raises ``sdr.ResourceBusy`` instead of looping forever.
- Creating a UDP QP does work independent of how many QPs exist, and an idle
  ``progress()`` over many QPs reads the sockets once, not once per QP.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from udp_pairs import UdpPair

import sdr
from sdr.backends.inproc import InprocNetwork, ManualClock
from sdr.backends.offload import OffloadTransport
from sdr.backends.udp import UdpTransport
from sdr.backends.udp import transport as udp_transport
from sdr.queue_pair import MAX_QUEUED_CONTROL

ATTR = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB", max_messages=16)
FLOOD = 5000
BURST = 50
APP = bytes([200])  # a control type for the application (64..255)


def _spoof(pair: UdpPair, payload: bytes) -> None:
    """A control datagram to qb from qa's address with qb's control id."""
    tqp = pair.qa.transport_qp
    pair.ta.send_control(tqp.peer_control, tqp.peer_control_id, payload)


@pytest.fixture
def udp() -> Iterator[UdpPair]:
    with UdpPair(ATTR, socket_buffer=1 << 20) as pair:
        yield pair


def _transfer(pair: UdpPair, n: int = 20_000) -> None:
    src = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros_like(src)
    rh = pair.qb.post_recv(pair.b.register(dst))
    sh = pair.qa.post_send(pair.a.register(src))
    for _ in range(50_000):
        if rh.record.arrived and sh.poll():
            break
        pair.a.progress()
        pair.b.progress()
        pair.ta.wait(0.0005)
    assert np.array_equal(src, dst)


def test_plain_qp_that_never_polls_control_keeps_a_bounded_queue(udp: UdpPair) -> None:
    for start in range(0, FLOOD, BURST):
        for i in range(start, start + BURST):
            _spoof(udp, APP + i.to_bytes(4, "big") + bytes(500))
        for _ in range(3):
            udp.b.progress()  # the application progresses but never calls poll_control
    for _ in range(10):
        udp.b.progress()
    upper = udp.qb.core.upper_control
    assert len(upper) == MAX_QUEUED_CONTROL
    assert udp.qb.counters()["control_dropped"] == FLOOD - MAX_QUEUED_CONTROL
    assert sum(map(len, upper)) <= MAX_QUEUED_CONTROL * sdr.transport.MAX_CONTROL_SIZE
    # tail drop: the oldest are kept
    assert [int.from_bytes(m[1:5], "big") for m in list(upper)[:3]] == [0, 1, 2]
    # SDR's own control (the CTS) is not queued there: data still flows while it is full
    _transfer(udp)
    # and once the application reads, its control messages flow again
    assert len(udp.qb.poll_control()) == MAX_QUEUED_CONTROL
    udp.qa.send_control(APP + b"hello")
    for _ in range(200):
        udp.a.progress()
        udp.b.progress()
        got = udp.qb.poll_control()
        if got:
            break
    assert got == [APP + b"hello"]


def test_udp_transport_queue_of_a_qp_is_bounded(udp: UdpPair) -> None:
    """Datagrams read for a QP that is not progressed (another QP's progress reads the
    shared control socket) wait in a bounded queue."""
    tqp = udp.qb.transport_qp
    for start in range(0, 3000, BURST):
        for i in range(start, start + BURST):
            _spoof(udp, APP + i.to_bytes(4, "big"))
        udp.tb.pump_control()
    while udp.tb.pump_control():
        pass
    assert len(tqp.control_in) == MAX_QUEUED_CONTROL
    assert tqp.counters()["control_dropped"] == 3000 - MAX_QUEUED_CONTROL
    assert udp.qb.poll_control() == []  # nothing for the application yet: the core has it
    udp.b.progress()
    assert len(udp.qb.poll_control()) == MAX_QUEUED_CONTROL


def test_one_udp_control_pump_reads_a_bounded_number(
    udp: UdpPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(udp_transport, "CONTROL_READS_PER_PUMP", 10, raising=False)
    for i in range(50):
        _spoof(udp, APP + bytes([i]))  # loopback: in the socket buffer when sendto returns
    udp.tb.pump_control()
    assert len(udp.qb.transport_qp.control_in) == 10


def test_inproc_control_queue_is_bounded() -> None:
    clock = ManualClock()
    net = InprocNetwork(clock=clock)
    a, b = sdr.Context("inproc", network=net), sdr.Context("inproc", network=net)
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    qa.connect(qb.info())
    qb.connect(qa.info())
    for i in range(FLOOD):
        qa.transport_qp.send_control(APP + i.to_bytes(4, "big"))
    got = qb.transport_qp.poll_control()
    assert len(got) == MAX_QUEUED_CONTROL
    assert [int.from_bytes(m[1:5], "big") for m in got[:2]] == [0, 1]  # oldest kept
    assert qb.transport_qp.counters()["control_dropped"] == FLOOD - MAX_QUEUED_CONTROL
    assert net.stats["control_dropped"] == FLOOD - MAX_QUEUED_CONTROL
    # the queue drains: the next ones are taken again
    for i in range(10):
        qa.transport_qp.send_control(APP + bytes([i]))
    assert len(qb.transport_qp.poll_control()) == 10
    # and through the core, a plain QP that never polls stays bounded too
    for i in range(3 * MAX_QUEUED_CONTROL):
        qa.transport_qp.send_control(APP + i.to_bytes(4, "big"))
        if i % 500 == 0:
            b.progress()
    b.progress()
    assert len(qb.core.upper_control) == MAX_QUEUED_CONTROL
    assert qb.counters()["control_dropped"] >= 2 * MAX_QUEUED_CONTROL


def test_offload_control_poll_reads_a_bounded_number(monkeypatch: pytest.MonkeyPatch) -> None:
    from sdr.backends.offload import qp as offload_qp

    monkeypatch.setattr(offload_qp, "CONTROL_READS_PER_POLL", 10, raising=False)
    ta, tb = OffloadTransport(progress="cpu"), OffloadTransport(progress="cpu")
    try:
        qa, qb = ta.create_qp(ATTR), tb.create_qp(ATTR)
        qa.connect(qb.info())
        qb.connect(qa.info())
        for i in range(50):
            qa.send_control(APP + bytes([i]))
        first = qb.poll_control()
        assert len(first) == 10
        rest: list[bytes] = []
        for _ in range(100):
            more = qb.poll_control()
            if not more and len(rest) >= 40:
                break
            rest += more
        assert len(first) + len(rest) == 50
    finally:
        ta.close()
        tb.close()


# --- QPN space ----------------------------------------------------------------------------


def test_a_full_qpn_space_raises_resource_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    attr = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB", generations=4)
    # QPNs 2..21: 20 QPNs, room for five QPs of four endpoints
    monkeypatch.setattr(udp_transport, "QPN_MAX", 21, raising=False)
    transport = UdpTransport(port=0, seed=5, socket_buffer=1 << 16)
    try:
        qps = [transport.create_qp(attr) for _ in range(5)]
        assert sorted(q for qp in qps for row in qp.qpns for q in row) == list(range(2, 22))
        with pytest.raises(sdr.ResourceBusy, match="QPN"):
            transport.create_qp(attr)
        assert len(transport._endpoints) == 20  # the failed QP kept nothing
        qps[2].close()
        again = transport.create_qp(attr)  # a closed QP's QPNs are free again
        assert len({q for row in again.qpns for q in row}) == 4
    finally:
        transport.close()


# --- per-QP cost --------------------------------------------------------------------------


class CountingList(list):  # type: ignore[type-arg]
    """A list that counts item reads."""

    reads = 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        CountingList.reads += 1
        return super().__getitem__(index)


def test_creating_a_qp_costs_the_same_however_many_exist() -> None:
    """The receive path's tables are updated, not rebuilt, when a QP is added: the
    existing QPs' keys are not read again (the old rebuild read all of them per create)."""
    n = 300
    transport = UdpTransport(port=0, seed=3, socket_buffer=1 << 16)
    CountingList.reads = 0
    try:
        qps = []
        for _ in range(n):
            qp = transport.create_qp(ATTR)
            qp.rkeys = CountingList(qp.rkeys)
            qps.append(qp)
        # a rebuild per create reads every existing rkey: ~ n^2 / 2 * generations
        assert CountingList.reads <= 2 * n, CountingList.reads
        for qp in qps[::2]:
            qp.close()
        assert CountingList.reads <= 2 * n, CountingList.reads
        assert len(transport._endpoints) == (n - len(qps[::2])) * ATTR.generations
    finally:
        transport.close()


def test_idle_progress_reads_the_sockets_once_not_once_per_qp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 200
    with UdpPair(ATTR, socket_buffer=1 << 20) as udp:
        a, b, ta = udp.a, udp.b, udp.ta
        more = [(a.create_qp(ATTR), b.create_qp(ATTR)) for _ in range(n - 1)]
        for qa, qb in more:
            qa.connect(qb.info())
            qb.connect(qa.info())
        pairs = [(udp.qa, udp.qb), *more]
        calls = {"pump": 0, "pump_control": 0}
        for name in calls:
            original = getattr(ta, name)

            def counted(*args, _original=original, _name=name):  # type: ignore[no-untyped-def]
                calls[_name] += 1
                return _original(*args)

            monkeypatch.setattr(ta, name, counted)
        a.progress()
        a.progress()
        assert calls["pump"] <= 4 and calls["pump_control"] <= 4, calls
        # and nothing is missed: a message to the last QP still arrives
        qa, qb = pairs[-1]
        src = np.arange(3000, dtype=np.uint16).astype(np.uint8)
        dst = np.zeros_like(src)
        rh = qa.post_recv(a.register(dst))
        sh = qb.post_send(b.register(src))
        for _ in range(20_000):
            if rh.record.arrived and sh.poll():
                break
            a.progress()
            b.progress()
            ta.wait(0.0005)
        assert np.array_equal(src, dst)
