"""The transport conformance suite: every backend must pass the same tests.

Each test runs once per entry of :data:`FACTORIES`. To add a backend, append a
:class:`BackendFactory` whose ``make`` returns a fresh :class:`~sdr.transport.Transport`
(one end of a connection; two are made per test) and whose ``alloc`` returns a
registrable zeroed uint8 array of that transport (its receive memory). Backends that need
processes or sockets may share them across tests through ``make`` (see the offload pool).

The tests drive :class:`~sdr.transport.TransportQP` directly (writes, key table,
completions, discards, control, pacing) and then the whole stack through ``sdr.Context``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

import sdr
from sdr.backends.inproc import InprocNetwork, InprocTransport
from sdr.backends.offload import OffloadTransport, WorkerPool
from sdr.pacing import UNPACED_BUDGET
from sdr.transport import Bind, CompletionBatch, Transport, TransportQP, WriteBatch

_DEADLINE_S = 20.0  # liveness guard only; nothing asserts on time


@dataclass(frozen=True)
class BackendFactory:
    """How the suite makes one end of a connection on a backend."""

    name: str
    make: Callable[[], Transport]
    alloc: Callable[[Transport, int], np.ndarray] = lambda _t, n: np.zeros(n, dtype=np.uint8)


_SHARED: dict[str, object] = {}


def _inproc() -> Transport:
    network = _SHARED.setdefault("network", InprocNetwork(seed=7))
    return InprocTransport(network=network)  # type: ignore[arg-type]


def _offload_workers() -> Transport:
    pool = _SHARED.get("pool")
    if pool is None or not pool.alive:  # type: ignore[attr-defined]
        pool = _SHARED["pool"] = WorkerPool(2)
    return OffloadTransport(pool=pool)  # type: ignore[arg-type]


def _offload_roce() -> Transport:
    _offload_workers()  # starts the shared pool if needed
    return OffloadTransport(pool=_SHARED["pool"], wire="roce")  # type: ignore[arg-type]


def _offload_alloc(transport: Transport, nbytes: int) -> np.ndarray:
    assert isinstance(transport, OffloadTransport)
    return transport.alloc(nbytes)


try:  # the udp backend, where this checkout has it
    from sdr.backends.udp import UdpTransport
except ImportError:  # pragma: no cover - depends on the checkout
    UdpTransport = None


def _udp() -> Transport:
    assert UdpTransport is not None
    return UdpTransport(port=0)  # a free port: several transports per test


FACTORIES: list[BackendFactory] = [
    BackendFactory("inproc", _inproc),
    BackendFactory("offload-cpu", lambda: OffloadTransport(progress="cpu"), _offload_alloc),
    BackendFactory("offload-workers", _offload_workers, _offload_alloc),
    BackendFactory("offload-roce", _offload_roce, _offload_alloc),
]
"""Backends under test; add yours here."""
if UdpTransport is not None:
    FACTORIES.append(BackendFactory("udp", _udp))


@pytest.fixture(scope="module", autouse=True)
def _shared_resources() -> Iterator[None]:
    yield
    pool = _SHARED.pop("pool", None)
    if pool is not None:
        pool.stop()  # type: ignore[attr-defined]
    _SHARED.clear()


@pytest.fixture(params=FACTORIES, ids=lambda f: f.name)
def factory(request: pytest.FixtureRequest) -> BackendFactory:
    return request.param


ATTR = sdr.QPAttr(
    mtu=256, chunk_size=1024, max_message_size=4096, max_messages=4, channels=3, generations=2
)
LAYOUT = ATTR.layout
SLOT = ATTR.max_message_size


@dataclass
class Pair:
    """Two connected transport QPs: ``tx`` sends, ``rx`` receives into ``buf``."""

    ta: Transport
    tb: Transport
    tx: TransportQP
    rx: TransportQP
    buf: np.ndarray
    src: np.ndarray

    def batch(self, gen: int, rows: list[tuple[int, int, int, int, int]]) -> WriteBatch:
        """rows: (channel, remote_offset, imm, src_offset, length)."""
        cols = list(zip(*rows, strict=True))
        return WriteBatch(
            self.ta.register(self.src),
            gen,
            np.array(cols[0], dtype=np.uint16),
            np.array(cols[1], dtype=np.int64),
            np.array(cols[2], dtype=np.uint32),
            np.array(cols[3], dtype=np.int64),
            np.array(cols[4], dtype=np.int64),
        )

    def completions(self, n: int) -> CompletionBatch:
        """Poll until ``n`` rows arrived, plus one more poll to catch extras."""
        parts: list[CompletionBatch] = []
        deadline = time.monotonic() + _DEADLINE_S
        while sum(map(len, parts)) < n and time.monotonic() < deadline:
            parts.append(self.rx.poll_completions(1024))
            self.tb.wait(0.001)
        parts.append(self.rx.poll_completions(1024))
        rows = [r for p in parts for r in zip(*(c.tolist() for c in _columns(p)), strict=True)]
        return CompletionBatch.from_rows(rows)

    def discards(self, total: int) -> dict[str, int]:
        """Poll until the receiver counted ``total`` discards; returns its counters."""
        deadline = time.monotonic() + _DEADLINE_S
        while time.monotonic() < deadline:
            assert len(self.rx.poll_completions(1024)) == 0
            counts = self.rx.counters()
            if sum(counts.values()) >= total:
                return counts
            self.tb.wait(0.001)
        return self.rx.counters()


def _columns(b: CompletionBatch) -> list[np.ndarray]:
    return [b.channels, b.generations, b.imms, b.byte_lens, b.remote_offsets]


@pytest.fixture
def pair(factory: BackendFactory) -> Iterator[Pair]:
    ta, tb = factory.make(), factory.make()
    try:
        tx, rx = ta.create_qp(ATTR), tb.create_qp(ATTR)
        tx.connect(rx.info())
        rx.connect(tx.info())
        src = factory.alloc(ta, 4 * SLOT)
        src[:] = np.random.default_rng(3).integers(0, 256, len(src), dtype=np.uint8)
        yield Pair(ta, tb, tx, rx, factory.alloc(tb, 4 * SLOT), src)
    finally:
        ta.close()
        tb.close()


def _packet_rows(msg_id: int, slot: int, packets: range, length: int = SLOT):
    """Write rows for these packets of a message of ``length`` bound at ``slot``."""
    mtu = ATTR.mtu
    return [
        (
            p % ATTR.channels,
            slot * SLOT + p * mtu,
            LAYOUT.encode(msg_id, p, p % 16),
            p * mtu,
            min(mtu, length - p * mtu),
        )
        for p in packets
    ]


def test_writes_land_where_bound_and_complete(pair: Pair) -> None:
    mr = pair.tb.register(pair.buf)
    pair.rx.bind(Bind(generation=1, slot=2, region=mr, offset=1000, length=3000, msg_id=5))
    rows = _packet_rows(5, 2, range(12), length=3000)
    pair.tx.post_writes(pair.batch(1, rows))
    got = pair.completions(len(rows))
    assert len(got) == len(rows)
    assert sorted(got.imms.tolist()) == sorted(r[2] for r in rows)
    assert set(got.generations.tolist()) == {1}
    assert sorted(got.channels.tolist()) == sorted(r[0] for r in rows)
    assert sorted(got.byte_lens.tolist()) == sorted(r[4] for r in rows)
    known = got.remote_offsets[got.remote_offsets >= 0]
    assert set(known.tolist()) <= {r[1] for r in rows}
    assert np.array_equal(pair.buf[1000:4000], pair.src[:3000])
    assert not pair.buf[:1000].any() and not pair.buf[4000:].any()
    assert sum(pair.rx.counters().values()) == 0


def test_unbound_slot_discards_as_late(pair: Pair) -> None:
    pair.tx.post_writes(pair.batch(0, _packet_rows(1, 0, range(4))))
    counts = pair.discards(4)
    assert counts.get("late") == 4
    assert not pair.buf.any()


def test_unbind_guards_against_late_packets(pair: Pair) -> None:
    mr = pair.tb.register(pair.buf)
    pair.rx.bind(Bind(generation=0, slot=1, region=mr, offset=0, length=SLOT, msg_id=9))
    pair.tx.post_writes(pair.batch(0, _packet_rows(9, 1, range(8))))
    assert len(pair.completions(8)) == 8
    pair.rx.unbind(0, 1)
    pair.tx.post_writes(pair.batch(0, _packet_rows(9, 1, range(8, 16))))
    assert pair.discards(8).get("late") == 8
    assert np.array_equal(pair.buf[: 8 * 256], pair.src[: 8 * 256])
    assert not pair.buf[8 * 256 :].any()


def test_other_generation_and_message_id_are_late(pair: Pair) -> None:
    mr = pair.tb.register(pair.buf)
    pair.rx.bind(Bind(generation=0, slot=0, region=mr, offset=0, length=SLOT, msg_id=3))
    pair.tx.post_writes(pair.batch(1, _packet_rows(3, 0, range(2))))  # generation 1 unbound
    pair.tx.post_writes(pair.batch(0, _packet_rows(4, 0, range(2))))  # another message id
    assert pair.discards(4).get("late") == 4
    assert not pair.buf.any()


def test_malformed_and_out_of_range_are_counted_not_written(pair: Pair) -> None:
    mr = pair.tb.register(pair.buf)
    pair.rx.bind(Bind(generation=0, slot=0, region=mr, offset=0, length=1000, msg_id=2))
    mtu = ATTR.mtu
    bad = [
        (0, 1 * mtu, LAYOUT.encode(2, 2, 0), 0, mtu),  # address disagrees with the imm
        (1, 4 * mtu, LAYOUT.encode(2, 4, 0), 0, mtu),  # past the bound 1000 bytes
        (2, 0, LAYOUT.encode(2, 0, 0), 0, 100),  # short packet that is not the last
        (0, 5 * SLOT, LAYOUT.encode(2, 0, 0), 0, mtu),  # beyond the slots
    ]
    pair.tx.post_writes(pair.batch(0, bad))
    counts = pair.discards(4)
    assert counts.get("malformed") == 2
    assert counts.get("out_of_range") == 2
    assert not pair.buf.any()


def test_generation_beyond_the_qp_is_stale_or_refused(pair: Pair) -> None:
    batch = pair.batch(ATTR.generations, _packet_rows(0, 0, range(1)))
    try:
        pair.tx.post_writes(batch)
    except sdr.ProtocolError:
        return  # a wire that addresses generations by QPN cannot even send it: also right
    assert pair.discards(1).get("stale_generation") == 1


def test_immediate_only_packet_completes_without_payload(pair: Pair) -> None:
    mr = pair.tb.register(pair.buf)
    pair.rx.bind(Bind(generation=1, slot=3, region=mr, offset=0, length=10, msg_id=7))
    imm = LAYOUT.encode(7, 1, 0xA)
    pair.tx.post_writes(pair.batch(1, [(2, 3 * SLOT, imm, 0, 0)]))
    got = pair.completions(1)
    assert got.imms.tolist() == [imm] and got.byte_lens.tolist() == [0]
    assert not pair.buf.any()


def test_control_messages_both_ways(pair: Pair) -> None:
    sent = [bytes([64, i]) * (i + 1) for i in range(5)]
    for data in sent:
        pair.tx.send_control(data)
    pair.rx.send_control(b"\x40back")
    got_rx: list[bytes] = []
    got_tx: list[bytes] = []
    deadline = time.monotonic() + _DEADLINE_S
    while (len(got_rx) < 5 or not got_tx) and time.monotonic() < deadline:
        got_rx += pair.rx.poll_control()
        got_tx += pair.tx.poll_control()
        pair.tb.wait(0.001)
    assert sorted(got_rx) == sorted(sent)
    assert got_tx == [b"\x40back"]


def test_control_message_too_large_is_refused(pair: Pair) -> None:
    with pytest.raises(sdr.ProtocolError):
        pair.tx.send_control(b"x" * (sdr.transport.MAX_CONTROL_SIZE + 1))


def test_register_refuses_read_only_buffers(factory: BackendFactory) -> None:
    transport = factory.make()
    try:
        with pytest.raises(sdr.ConfigError):
            transport.register(bytes(16))
    finally:
        transport.close()


def test_send_budget_follows_the_rate_limit(factory: BackendFactory) -> None:
    transport = factory.make()
    try:
        free = transport.create_qp(ATTR)
        assert free.send_budget(transport.now()) == UNPACED_BUDGET
        attr = ATTR.replace(rate_limit="1Mbit/s")
        paced, peer = transport.create_qp(attr), transport.create_qp(attr)
        paced.connect(peer.info())
        peer.connect(paced.info())
        budget = paced.send_budget(transport.now())
        assert 0 < budget < UNPACED_BUDGET
        src = factory.alloc(transport, budget * ATTR.mtu)
        region = transport.register(src)
        rows = len(src) // ATTR.mtu
        paced.post_writes(
            WriteBatch(
                region,
                0,
                np.zeros(rows, dtype=np.uint16),
                np.arange(rows, dtype=np.int64) * ATTR.mtu,
                np.zeros(rows, dtype=np.uint32),
                np.arange(rows, dtype=np.int64) * ATTR.mtu,
                np.full(rows, ATTR.mtu, dtype=np.int64),
            )
        )
        # at 1 Mbit/s the bucket refills ~500 packets/s: far below one more burst
        assert paced.send_budget(transport.now()) < budget
    finally:
        transport.close()


def _contexts(factory: BackendFactory, attr: sdr.QPAttr):
    a, b = sdr.Context(backend=factory.make()), sdr.Context(backend=factory.make())
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    return a, b, qa, qb


def test_messages_through_the_context(factory: BackendFactory) -> None:
    attr = sdr.QPAttr(mtu=512, chunk_size=2048, max_message_size="64KiB", channels=4)
    a, b, qa, qb = _contexts(factory, attr)
    try:
        size = 40_000
        src = factory.alloc(a.transport, 3 * size)
        src[:] = np.random.default_rng(5).integers(0, 256, len(src), dtype=np.uint8)
        dst = factory.alloc(b.transport, 3 * size)
        ms, md = a.register(src), b.register(dst)
        recvs = [qb.post_recv(md, i * size, size) for i in range(3)]
        sends = [qa.post_send(ms, i * size, size, imm=0x1234_0000 + i) for i in range(3)]
        deadline = time.monotonic() + _DEADLINE_S
        while not all(r.record.arrived for r in recvs) and time.monotonic() < deadline:
            a.progress()
            b.progress()
            b.transport.wait(0.001)
        assert all(s.poll() for s in sends)
        for i, r in enumerate(recvs):
            assert r.bitmap.all() and r.imm == 0x1234_0000 + i
            r.complete()
        assert np.array_equal(src, dst)
        counters = qb.counters()
        assert counters["messages_received"] == 3
        assert counters["packets_accepted"] == 3 * -(-size // 512)
        assert counters["late"] == counters["malformed"] == 0
    finally:
        a.close()
        b.close()


def test_the_suite_passes_on_the_reference_datapath() -> None:
    """The whole suite again in a fresh interpreter with ``SDR_DATAPATH=python`` (this run
    takes the native datapath where it is built): the Python reference of the placement
    step, the UDP loops and the offload workers must conform as well."""
    import os
    import pathlib
    import subprocess
    import sys

    if os.environ.get("SDR_DATAPATH") == "python":
        pytest.skip("this run already is the reference datapath")
    env = {**os.environ, "SDR_DATAPATH": "python"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        cwd=pathlib.Path(__file__).resolve().parents[1],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout
