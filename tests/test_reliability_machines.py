"""The scheme state machines on their own: events in with an explicit ``now``, actions out.

No QP, no transport, no clock: this is how a simulator drives them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdr
from sdr.reliability import (
    Finished,
    ReliabilityConfig,
    SendChunks,
    SendMessage,
    create_scheme,
)
from sdr.reliability.messages import Ack, Digest, EcNack, Nack, Probe, Sack, decode_message

CS = 1024
RTT = 0.01


def scheme(name: str, **kw):
    return create_scheme(ReliabilityConfig(scheme=name, rtt=RTT, chunk_size=CS, **kw))


def payload(n: int, seed: int = 0) -> memoryview:
    return memoryview(np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8))


def split(actions):
    chunks = [a for a in actions if isinstance(a, SendChunks)]
    control = [decode_message(a.message.encode()) for a in actions if isinstance(a, SendMessage)]
    done = [a for a in actions if isinstance(a, Finished)]
    return chunks, control, done


def run_work(machine, now):
    while machine.has_work():
        machine.do_work(now)


class Wire:
    """Delivers a sender's chunks into a receiver's buffers, dropping chosen ones."""

    def __init__(self, sender, receiver, lose=()):
        self.s, self.r = sender, receiver
        self.lose = set(lose)  # (lane, chunk) lost on first transmission
        self.sent: dict[tuple[int, int], int] = {}

    def buffers(self, machine, lane):
        return machine.data if lane == 0 else memoryview(machine.lane_buffer(lane))

    def deliver(self, now, actions):
        """Carry out sender actions in order: chunks depart and land at once, control
        messages reach the receiver; returns the control messages."""
        control = []
        for a in actions:
            if isinstance(a, SendMessage):
                control.append(decode_message(a.message.encode()))
                self.r.on_control(now, control[-1])
                continue
            if not isinstance(a, SendChunks):
                continue
            self.s.on_sent(now, a.lane, a.chunks)
            landed = []
            for c in a.chunks.tolist():
                n = self.sent.get((a.lane, c), 0)
                self.sent[(a.lane, c)] = n + 1
                if (a.lane, c) in self.lose and n == 0:
                    continue
                src, dst = self.buffers(self.s, a.lane), self.buffers(self.r, a.lane)
                lo, hi = c * CS, min((c + 1) * CS, len(src))
                dst[lo:hi] = src[lo:hi]
                landed.append(c)
            if landed:
                self.r.on_chunks(now, a.lane, np.array(landed))
        return control


def test_sr_sender_arms_rto_at_departure_and_retransmits_exactly_the_unacked():
    s = scheme("sr-rto").sender(0, payload(10 * CS))
    s.start(0.0)
    chunks, _, _ = split(s.actions())
    assert chunks[0].chunks.tolist() == list(range(10))
    assert s.next_timer() > 10.0  # no probe while its chunks wait to leave: the deadline
    s.on_sent(0.5, 0, np.arange(10))  # pacing held them until 0.5
    assert s.next_timer() == pytest.approx(0.5 + 3 * RTT)
    s.on_control(0.51, Sack.build(0, np.array([True] * 4 + [False] + [True] * 5), True))
    s.handle_timer(0.5 + 3 * RTT)
    chunks, control, _ = split(s.actions())
    assert [c.chunks.tolist() for c in chunks] == [[4]] and chunks[0].retransmit
    assert any(isinstance(m, Probe) for m in control)
    s.on_control(0.6, Ack(0))
    assert split(s.actions())[2][0].error is None
    assert s.next_timer() is None


def _sr_pair_after_digest(length: int) -> tuple:
    """An sr-rto sender of ``length`` bytes started at 0 and its receiver, which has the
    sender's first control messages (the DIGEST); returns (sender, receiver, the
    sender's first SendChunks actions)."""
    data = payload(length)
    s = scheme("sr-rto").sender(3, data)
    r = scheme("sr-rto").receiver(3, memoryview(bytearray(len(data))))
    s.start(0.0)
    run_work(s, 0.0)
    chunks, control, _ = split(s.actions())
    for msg in control:
        r.on_control(0.001, msg)
    return s, r, chunks


def test_sr_receiver_acks_coalesced_and_completes_after_verification():
    s, r, chunks = _sr_pair_after_digest(5 * CS + 100)
    wire = Wire(s, r, lose={(0, 2)})
    wire.deliver(0.005, [SendChunks(0, chunks[0].chunks)])
    sack_at = 0.005 + r.config.ack_delay_gapped  # chunk 2 is missing: the sooner interval
    assert r.config.ack_delay_gapped < r.config.ack_delay
    assert r.next_timer() == pytest.approx(sack_at)  # the delayed SACK
    r.handle_timer(sack_at)
    _, control, done = split(r.actions())
    assert not done and len(control) == 1
    assert control[0].cum == 2 and control[0].acked().tolist() == [0, 1, 3, 4, 5]
    wire.deliver(0.04, [SendChunks(0, np.array([2]), True)])
    _, control, done = split(r.actions())
    assert isinstance(control[-1], Ack) and done[0].error is None
    assert bytes(r.data) == bytes(s.data)


def test_sr_receiver_nacks_a_corrupt_chunk_and_rechecks_it():
    data = payload(4 * CS)
    sch = scheme("sr-nack")
    s, r = sch.sender(0, data), sch.receiver(0, memoryview(bytearray(4 * CS)))
    s.start(0.0)
    run_work(s, 0.0)
    for msg in split(s.actions())[1]:
        r.on_control(0.0, msg)
    bad = bytearray(data)
    bad[CS + 7] ^= 0xFF
    r.data[:] = bad
    r.on_chunks(0.005, 0, np.arange(4))
    _, control, done = split(r.actions())
    nacks = [m for m in control if isinstance(m, Nack)]
    assert not done and nacks[0].chunks().tolist() == [1]
    r.data[CS : 2 * CS] = data[CS : 2 * CS]  # the retransmission overwrites it
    r.handle_timer(0.005 + 3 * RTT)  # the SACK is due, and the recheck one RTO after the NACK
    _, control, done = split(r.actions())
    assert done and done[0].error is None and r.stats["bad_chunks"] == 1


@pytest.mark.parametrize("name", ["ec-mds", "ec-xor"])
def test_ec_with_m_losses_decodes_without_any_nack(name):
    sch = scheme(name, k=4, m=2)
    data = payload(12 * CS - 10)  # 3 submessages, short last chunk
    s, r = sch.sender(0, data), sch.receiver(0, memoryview(bytearray(len(data))))
    s.start(0.0)
    run_work(s, 0.0)
    wire = Wire(s, r, lose={(0, 1), (0, 2), (0, 4), (1, 3), (0, 11)})  # <= 1 per XOR group
    wire.deliver(0.005, s.actions())
    assert r.next_timer() == pytest.approx(0.005 + sch.config.fto(12, 6))
    run_work(r, 0.005)
    _, control, done = split(r.actions())
    assert [type(m) for m in control] == [Ack] and done[0].error is None
    assert bytes(r.data) == bytes(data)
    assert r.stats["chunks_decoded"] == 4


def test_ec_beyond_m_waits_for_fto_then_nacks_exactly_the_missing_data():
    sch = scheme("ec-mds", k=4, m=1)
    data = payload(8 * CS)
    s, r = sch.sender(0, data), sch.receiver(0, memoryview(bytearray(len(data))))
    s.start(0.0)
    run_work(s, 0.0)
    wire = Wire(s, r, lose={(0, 5), (0, 6)})  # two losses in submessage 1, m = 1
    wire.deliver(0.005, s.actions())
    run_work(r, 0.005)
    assert split(r.actions())[1] == []  # silent until FTO
    fto = r.next_timer()
    assert fto == pytest.approx(0.005 + sch.config.fto(8, 2))
    r.handle_timer(fto)
    _, control, _ = split(r.actions())
    (nack,) = control
    assert isinstance(nack, EcNack) and list(nack.missing) == [1]
    assert nack.chunks().tolist() == [5, 6]
    s.on_control(fto + 0.005, nack)
    chunks, _, _ = split(s.actions())
    assert chunks[0].chunks.tolist() == [5, 6] and chunks[0].retransmit
    wire.deliver(fto + 0.005, [chunks[0]])
    run_work(r, fto + 0.006)
    assert isinstance(split(r.actions())[1][-1], Ack)
    assert bytes(r.data) == bytes(data)


@pytest.mark.parametrize("name", ["sr-rto", "sr-nack"])
def test_a_write_queued_behind_others_does_not_probe_until_its_chunks_leave(name):
    # before: its silence timer ran from its start, so a write waiting in the pacer's
    # queue behind others probed every RTO (20 probes per 16 MiB piece of a file)
    s = scheme(name).sender(3, payload(5 * CS))
    s.start(0.0)
    run_work(s, 0.0)
    s.actions()
    rto = s.rto
    assert s.next_timer() > 10 * rto  # only the no-progress deadline: nothing left yet
    s.handle_timer(5 * rto)
    assert not [m for m in split(s.actions())[1] if isinstance(m, Probe)]
    s.on_sent(5 * rto, 0, np.arange(5))  # they leave now; nothing is heard after
    assert s.next_timer() == pytest.approx(6 * rto)  # the chunks' RTOs (and silence)
    s.handle_timer(6 * rto)
    assert [m for m in split(s.actions())[1] if isinstance(m, Probe)]


def test_probe_before_anything_arrived_counts_as_fto_expiry():
    sch = scheme("ec-xor", k=2, m=1)
    r = sch.receiver(0, memoryview(bytearray(3 * CS)))
    r.on_control(0.0, Probe(0))
    _, control, _ = split(r.actions())
    ec = [m for m in control if isinstance(m, EcNack)]
    assert ec[0].chunks().tolist() == [0, 1, 2]
    assert any(isinstance(m, Sack) for m in control)


def test_receiver_rejects_a_digest_of_another_length():
    sch = scheme("sr-rto")
    r = sch.receiver(0, memoryview(bytearray(2 * CS)))
    r.on_control(0.0, Digest(0, 3 * CS, sch.fingerprint, CS, 0, np.zeros(3, np.uint32)))
    _, control, done = split(r.actions())
    assert isinstance(done[0].error, sdr.ProtocolError)
    assert "wrote 3072 bytes" in str(done[0].error) and "2048 bytes" in str(done[0].error)
    assert control == [Ack(0, failed=True)]


def test_receiver_global_timeout_is_armed_by_the_first_sign_of_the_message():
    sch = scheme("sr-rto", global_timeout=1.0)
    r = sch.receiver(0, memoryview(bytearray(2 * CS)))
    assert r.next_timer() is None
    r.on_chunks(5.0, 0, np.array([0]))
    r.handle_timer(5.0 + RTT)  # the SACK
    r.actions()
    assert r.next_timer() == pytest.approx(6.0)
    r.handle_timer(6.0)
    _, control, done = split(r.actions())
    assert isinstance(done[0].error, sdr.TimeoutError)
    assert "1 of 2 chunks received, 1 of them unverified" in str(done[0].error)
    assert "no progress for 1 s" in str(done[0].error)
    assert control == [Ack(0, failed=True)]


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_ec_property_repairs_exactly_what_cannot_be_decoded(data):
    name = data.draw(st.sampled_from(["ec-mds", "ec-xor"]))
    k = data.draw(st.integers(1, 6))
    m = data.draw(st.integers(1, 3))
    n_chunks = data.draw(st.integers(2, 20))  # one chunk goes as SR (test_reliability_ec)
    sch = scheme(name, k=k, m=m)
    size = n_chunks * CS - data.draw(st.integers(0, CS - 1))
    payload_bytes = payload(size, seed=n_chunks)
    s, r = sch.sender(0, payload_bytes), sch.receiver(0, memoryview(bytearray(size)))
    subs = -(-n_chunks // k)
    lost_data = data.draw(st.sets(st.integers(0, n_chunks - 1)))
    lost_parity = data.draw(st.sets(st.integers(0, subs * m - 1)))
    wire = Wire(s, r, lose={(0, c) for c in lost_data} | {(1, p) for p in lost_parity})
    s.start(0.0)
    run_work(s, 0.0)
    wire.deliver(0.005, s.actions())
    # which submessages can the code rebuild from what arrived?
    undecodable = set()
    for sub in range(subs):
        data_ok = [c not in lost_data for c in range(sub * k, min(sub * k + k, n_chunks))]
        parity_ok = [p not in lost_parity for p in range(sub * m, sub * m + m)]
        if not sch.codec.can_recover(data_ok + parity_ok):
            undecodable.add(sub)
    expected = sorted(c for c in lost_data if c // k in undecodable)
    now = 0.005
    for _ in range(20):  # both machines' timers, control both ways, chunks land at once
        run_work(r, now)
        for msg in split(r.actions())[1]:
            s.on_control(now, msg)
        wire.deliver(now, s.actions())
        if not r.active:
            break
        now = min(t for t in (s.next_timer(), r.next_timer()) if t is not None)
        for machine in (s, r):
            if machine.next_timer() is not None and machine.next_timer() <= now:
                machine.handle_timer(now)
    assert not r.active and r.error is None
    assert bytes(r.data) == bytes(payload_bytes)
    assert sorted(np.flatnonzero(s.tracker.sends > 1).tolist()) == expected
    assert r.stats.get("fallbacks", 0) == (1 if undecodable else 0)


def test_sr_receiver_acks_in_order_data_later_and_a_hole_sooner():
    """The SACK of data that came in order waits ``ack_delay`` (rtt/2 with ``fixed``);
    once a hole shows, ``ack_delay_gapped`` (rtt/4), even if a later SACK was scheduled:
    as TCP acks out-of-order data at once (RFC 5681)."""
    _, r, _ = _sr_pair_after_digest(6 * CS)
    r.on_chunks(0.005, 0, np.array([0, 1]))
    assert not r.gapped and r.next_timer() == pytest.approx(0.005 + r.config.ack_delay)
    r.on_chunks(0.006, 0, np.array([3]))  # chunk 2 is missing
    assert r.gapped and r.next_timer() == pytest.approx(0.006 + r.config.ack_delay_gapped)
    r.on_chunks(0.007, 0, np.array([2]))  # filled: in order again
    assert not r.gapped
