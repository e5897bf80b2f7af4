"""A message is never complete with wrong bytes: each way it used to happen, as a test.

1. A damaged late duplicate (ICRC off) or a forged packet for a chunk that is already
   verified used to be copied over it; the message then completed with wrong bytes.
2. With the paper's 128 slots the (message id, slot, generation) triple came round every
   1,024 receives, so a genuine packet of message 0 landed in message 1,024.
Each test failed on the code before the placement guard and the slot schedule.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_reliability_support import ATTR, RTT, ScriptedNetwork, make_rpair, random_bytes

import sdr
from sdr import placement
from sdr.adaptive import AdaptivePolicy, Candidate
from sdr.backends.inproc import InprocNetwork, InprocTransport, ManualClock
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.roce import encode_packet
from sdr.id_reuse import receive_triple, reuse_period
from sdr.runtime import ReliableQP, wait_all
from sdr.runtime.handles import drive
from sdr.transport import Bind

SCHEMES = ["sr-rto", "sr-nack", "ec-mds", "ec-xor"]
CHUNK = ATTR.chunk_size
N_CHUNKS = 16


class LateDamage(ScriptedNetwork):
    """Drops the first copy of the data lane's last chunks (so the message stays open for
    a repair) and sends, one RTT after each packet of chunk 0, a copy whose bytes are
    damaged: what a link with ICRC off, or a forger, delivers."""

    def __init__(self) -> None:
        super().__init__(
            ATTR.max_message_size,
            drop=lambda slot, off, n: slot == 0 and off >= (N_CHUNKS - 4) * CHUNK and n == 0,
            clock=ManualClock(),
            delay=RTT / 2,
        )
        self.damaged = 0

    def send(self, dst: int, item: Any, control: bool = False) -> None:
        super().send(dst, item, control)
        if control or not isinstance(item, tuple) or not len(item[4]):
            return
        gen, ch, roff, imm, payload = item
        slot, offset = divmod(roff, self.slot_size)
        if slot == 0 and offset < CHUNK and self.seen[(slot, offset)] == 1:
            bad = bytes(b ^ 0x5A for b in payload)
            when = self.clock() + 1.5 * RTT
            heapq.heappush(self._heap, (when, next(self._order), dst, (gen, ch, roff, imm, bad)))
            self.damaged += 1


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_late_damaged_copy_never_rewrites_a_verified_chunk(scheme: str) -> None:
    net = LateDamage()
    kw = {"k": 4, "m": 2} if scheme.startswith("ec") else {}
    pair = make_rpair(scheme, net=net, **kw)
    src = random_bytes(N_CHUNKS * CHUNK, seed=5)
    dst = np.zeros_like(src)
    rh = pair.r.post_recv(pair.r.ctx.register(dst))
    wh = pair.s.write(pair.s.ctx.register(src))
    wait_all([wh, rh], timeout=60)
    assert net.damaged == CHUNK // ATTR.mtu  # every packet of chunk 0 got a damaged twin
    assert np.array_equal(src, dst), f"{int((src != dst).sum())} wrong bytes in a completed receive"
    assert pair.r.qp.counters()["duplicates"] >= net.damaged  # refused, never written


def test_a_packet_for_a_placed_offset_is_refused_by_the_key_table() -> None:
    keys = sdr.key_table.KeyTable(ATTR)
    mr = InprocTransport(InprocNetwork()).register(np.zeros(CHUNK, dtype=np.uint8))
    keys.bind(Bind(generation=0, slot=3, region=mr, offset=0, length=CHUNK, msg_id=9))
    imm = ATTR.layout.encode(9, 1, 0)
    va = 3 * ATTR.max_message_size + ATTR.mtu
    assert isinstance(keys.resolve(0, va, ATTR.mtu, imm), sdr.key_table.Placement)
    assert keys.resolve(0, va, ATTR.mtu, imm) == sdr.key_table.DUPLICATE
    keys.reopen(0, 3, 1, 2)  # a failed check: the repair may land
    assert isinstance(keys.resolve(0, va, ATTR.mtu, imm), sdr.key_table.Placement)
    keys.seal(0, 3, 0, 4)  # verified: nothing more, not even a first copy
    first = ATTR.layout.encode(9, 0, 0)
    assert keys.resolve(0, 3 * ATTR.max_message_size, ATTR.mtu, first) == "duplicates"


def _change_a_verified_chunk(**kw: Any) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """An sr-rto transfer whose receive buffer changes (one byte of chunk 0) after chunk 0
    is verified, behind the driver's back; (the pair, the receive handle, src, dst)."""
    net = LateDamage()
    pair = make_rpair("sr-rto", net=net, **kw)
    src = random_bytes(N_CHUNKS * CHUNK, seed=6)
    dst = np.zeros_like(src)
    rh = pair.r.post_recv(pair.r.ctx.register(dst))
    wh = pair.s.write(pair.s.ctx.register(src))
    inc = pair.r.connection.receives.receiving[rh.seq]
    for _ in range(100_000):  # until chunk 0 is verified, then damage it behind its back
        pair.s.progress(), pair.r.progress()
        if inc.machine is not None and inc.machine.verified[0]:
            break
        net.clock.advance(1e-4)
    assert inc.machine.verified[0]
    dst[7] ^= 0xFF
    wait_all([wh, rh], timeout=60)
    return pair, rh, src, dst


def test_a_chunk_changed_after_verification_is_caught_by_the_final_check() -> None:
    """Defence in depth, asked for (``final_check=True``): bytes of a verified chunk
    change before the message is final; the final check sends the chunk back to repair."""
    _, rh, src, dst = _change_a_verified_chunk(final_check=True)
    assert np.array_equal(src, dst)
    assert rh.stats["final_check_failed"] == 1


def test_the_final_check_runs_by_default_where_the_driver_cannot_refuse_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver whose NIC writes payload itself (verbs: ``guards_placement`` False) gets
    the final check without asking."""
    from sdr.backends.inproc.transport import InprocQP  # noqa: PLC0415

    monkeypatch.setattr(InprocQP, "guards_placement", False)
    pair, rh, src, dst = _change_a_verified_chunk()
    assert pair.r.config.final_check is True
    assert np.array_equal(src, dst)
    assert rh.stats["final_check_failed"] == 1


def test_a_driver_that_seals_verified_chunks_skips_the_second_pass() -> None:
    """Every software driver refuses writes into a sealed chunk, so by default the receiver
    does not read the whole message again (a tenth of its CPU per byte)."""
    pair = make_rpair("sr-nack")
    assert pair.r.config.final_check is False
    src = random_bytes(N_CHUNKS * CHUNK, seed=7)
    dst = np.zeros_like(src)
    rh = pair.r.post_recv(pair.r.ctx.register(dst))
    wh = pair.s.write(pair.s.ctx.register(src))
    wait_all([wh, rh], timeout=60)
    assert np.array_equal(src, dst)
    assert pair.r.counters["final_checked_bytes"] == 0
    assert pair.r.counters["receives_completed"] == 1


def _plain_pair() -> tuple[Any, ...]:
    net = InprocNetwork(clock=ManualClock())
    a, b = sdr.Context(InprocTransport(net)), sdr.Context(InprocTransport(net))
    qa, qb = a.create_qp(), b.create_qp()  # the default attributes
    qa.connect(qb.info())
    qb.connect(qa.info())
    return net, a, b, qa, qb


def test_a_straggler_from_1024_messages_ago_is_not_taken_for_a_later_message() -> None:
    net, a, b, qa, qb = _plain_pair()
    mtu = qa.attr.mtu
    src = np.arange(mtu, dtype=np.uint8)
    smr, captured = a.register(src), []
    original = net.send

    def tap(dst: int, item: Any, control: bool = False) -> None:
        if not control and not captured:
            captured.append(item)  # a genuine packet of message 0, kept as a straggler
        original(dst, item, control)

    net.send = tap  # type: ignore[method-assign]
    for n in range(1024):
        rh = qb.post_recv(b.register(np.zeros(mtu, dtype=np.uint8)))
        sh = qa.post_send(smr)
        while not rh.record.arrived or not sh.record.done:
            a.progress(), b.progress()
        rh.complete()
        assert n or captured
    target = np.zeros(mtu, dtype=np.uint8)
    rh = qb.post_recv(b.register(target))  # receive 1,024: nothing sent to it yet
    b.progress()
    before = qb.counters()
    net.send(qb.transport_qp.eid, captured[0])
    b.progress()
    after = qb.counters()
    assert not rh.bitmap.any() and not target.any(), "message 0's packet landed in message 1,024"
    assert (
        after["late"] + after["stale_generation"] == before["late"] + before["stale_generation"] + 1
    )


@pytest.mark.parametrize(
    ("slots", "generations", "id_bits"), [(3, 1, 3), (4, 2, 3), (5, 2, 3), (6, 4, 4), (7, 3, 4)]
)
def test_the_triple_comes_round_exactly_every_reuse_period(slots, generations, id_bits) -> None:
    attr = sdr.QPAttr(
        mtu=256,
        chunk_size=256,
        max_message_size=256,
        max_messages=slots,
        generations=generations,
        id_bits=id_bits,
        offset_bits=32 - id_bits - 4,
    )
    first = receive_triple(attr, 0)
    again = next(n for n in range(1, 10_000) if receive_triple(attr, n) == first)
    assert again == reuse_period(attr)


def test_default_attributes_outlive_a_straggler_at_400_gbit_s_and_100_ms() -> None:
    attr = sdr.QPAttr()
    assert reuse_period(attr) == 127 * 1024
    for rtt in (0.025, 0.1):
        assert sdr.id_reuse.straggler_shortfall(attr, rtt, 400e9, 64 << 10) is None
    text = sdr.id_reuse.straggler_shortfall(sdr.QPAttr(max_messages=128), 0.1, 400e9, 64 << 10)
    assert text is not None and "max_messages" in text
    text = sdr.id_reuse.straggler_shortfall(attr, 0.1, 800e9, 64 << 10)
    assert text is not None and "id_bits to 11" in text


def test_create_qp_warns_when_its_rate_lets_ids_repeat_too_soon() -> None:
    ctx = sdr.Context(InprocTransport(InprocNetwork()))
    with pytest.warns(sdr.id_reuse.StragglerWarning, match="odd max_messages"):
        ctx.create_qp(sdr.QPAttr(max_messages=128, rate_limit="400Gbit/s"))


@contextlib.contextmanager
def _connected_udp_qps(attr: sdr.QPAttr) -> Iterator[tuple]:
    """Two UDP contexts on loopback with one QP each, connected; closed after."""
    a, b = sdr.Context(backend=UdpTransport(port=0)), sdr.Context(backend=UdpTransport(port=0))
    try:
        qa, qb = a.create_qp(attr), b.create_qp(attr)
        qa.connect(qb.info())
        qb.connect(qa.info())
        yield a, b, qa, qb
    finally:
        a.close()
        b.close()


def test_udp_forged_packet_with_a_valid_icrc_never_rewrites_placed_bytes() -> None:
    """Over real sockets with the ICRC on: a forger who knows QPN, rkey and the sender's
    address (its ICRC is valid) cannot rewrite a packet that has landed."""
    attr = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB")
    with _connected_udp_qps(attr) as (a, b, qa, qb):
        ta, tb = a.transport, b.transport
        dst = np.zeros(4096, dtype=np.uint8)
        rh = qb.post_recv(b.register(dst))
        src = random_bytes(4096, seed=9)
        qa.post_send(a.register(src))
        for _ in range(2000):
            a.progress(), b.progress()
            if rh.record.arrived:
                break
        assert rh.record.arrived and np.array_equal(src, dst)
        rec, tqp = rh.record, qb.transport_qp
        sock = ta.data_socket
        where = ("127.0.0.1", tb.port)
        for p in range(4):
            pkt = encode_packet(
                sock.getsockname(),
                where,
                tqp.qpns[rec.generation][0],
                99,
                rec.slot * attr.max_message_size + p * 1024,
                tqp.rkeys[rec.generation],
                attr.layout.encode(rec.msg_id, p, 0),
                b"\xee" * 1024,
            )
            sock.sendto(pkt, where)
        for _ in range(200):
            b.progress()
        assert np.array_equal(src, dst), "a forged packet rewrote placed bytes"
        assert qb.counters()["duplicates"] == 4


@pytest.mark.parametrize(
    ("datapath", "scheme"), [("native", "sr-nack"), ("python", "sr-nack"), ("native", "adaptive")]
)
def test_udp_chunks_are_checked_from_packet_crcs_and_a_forged_first_copy_fails_there(
    datapath: str, scheme: str
) -> None:
    """Over real sockets the receiver checks each chunk from its packets' CRC-32s (the
    UDP driver computes them in the ICRC's read), never reading the chunk again; a
    forged packet with a valid ICRC that lands before the genuine one makes its chunk's
    combined checksum differ, so the chunk is reopened, repaired, and the message
    completes with the sender's bytes (on both datapaths; and through an adaptive receive,
    which hands the packet checksums to the member the DIGEST names)."""
    if datapath == "native" and placement.place_batch_native is None:
        pytest.skip("sdr._placement not built")
    previous = placement.use_datapath(datapath)
    attr = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB")
    try:
        with _connected_udp_qps(attr) as (a, b, qa, qb):
            _forged_first_copy_fails_its_chunk(attr, scheme, a, b, qa, qb)
    finally:
        placement.use_datapath(previous)


def _forged_first_copy_fails_its_chunk(
    attr: sdr.QPAttr, scheme: str, a: sdr.Context, b: sdr.Context, qa: Any, qb: Any
) -> None:
    """Post a receive on ``qb``, land a forged copy of packet 5 in it, then write the
    message from ``qa``: it completes with the sender's bytes after one bad chunk."""
    ta, tb = a.transport, b.transport
    kw: dict[str, Any] = {}
    if scheme == "adaptive":  # one candidate, SR: the DIGEST names it per message
        kw = {"adaptive": AdaptivePolicy(None, (Candidate("sr-nack"),))}
    ra, rb = (ReliableQP(q, "sr-nack", rtt=0.01, **kw) for q in (qa, qb))
    dst = np.zeros(64 * 1024, dtype=np.uint8)
    rh = rb.post_recv(b.register(dst))
    rb.progress()  # posted and bound: a packet for it now lands
    msg_id, slot, generation = receive_triple(attr, 0)
    tqp, sock, where = qb.transport_qp, ta.data_socket, ("127.0.0.1", tb.port)
    forged = encode_packet(
        sock.getsockname(), where, tqp.qpns[generation][0], 99,
        slot * attr.max_message_size + 5 * 1024, tqp.rkeys[generation],
        attr.layout.encode(msg_id, 5, 0), b"\xee" * 1024,
    )  # fmt: skip
    sock.sendto(forged, where)
    for _ in range(50):
        rb.progress()
    src = random_bytes(64 * 1024, seed=4)
    wh = ra.write(a.register(src))
    drive([ra, rb], lambda: wh.finished and rh.finished, 30)
    assert rh.error is None and np.array_equal(src, dst)
    counters = rb.counters
    assert counters["receive_bad_chunks"] == 1  # chunk 1, from the forged packet
    assert counters["receive_chunks_checked_from_packet_crcs"] >= 16
