"""Adaptive reliable QPs over the in-process wire: per-message schemes agreed through the
DIGEST, switching with the loss, intact bytes, loss reports, and refused mismatches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_reliability_support import ATTR, RTT, random_bytes, scripted

import sdr
from sdr.adaptive import AdaptivePolicy, Candidate
from sdr.backends.inproc import InprocNetwork, InprocTransport, ManualClock
from sdr.errors import ProtocolError
from sdr.reliability.geometry import MessageGeometry
from sdr.reliability.integrity import DigestBuilder, DigestStore
from sdr.reliability.messages import DIGEST_PER_MESSAGE, Digest
from sdr.runtime import ReliableQP, wait_all

SR, MDS, XOR = Candidate("sr-nack"), Candidate("ec-mds", 8, 2), Candidate("ec-xor", 8, 2)


def drop_threshold_selector(est, size, cands):
    """EC when more than 2% of chunks drop, else SR (a stand-in for the analytic one)."""
    lossy = (est.chunk_drop or 0.0) > 0.02
    return {c: (1.0 if c.is_ec == lossy else 2.0) for c in cands}


def rpair(net, sender_cands=(SR, MDS), receiver_cands=(SR, MDS), selector=None):
    a, b = sdr.Context(InprocTransport(net)), sdr.Context(InprocTransport(net))
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    qa.connect(qb.info())
    qb.connect(qa.info())
    policy = AdaptivePolicy(
        selector or drop_threshold_selector, sender_cands, interval=0.0, min_trials=16
    )
    s = ReliableQP(qa, "sr-nack", rtt=RTT, adaptive=policy, max_in_flight=2)
    r = ReliableQP(qb, "sr-nack", rtt=RTT, adaptive=AdaptivePolicy(None, receiver_cands))
    return s, r, policy


def send(s, r, sizes, seed):
    srcs = [random_bytes(n, seed=seed + i) for i, n in enumerate(sizes)]
    dsts = [np.zeros(n, dtype=np.uint8) for n in sizes]
    handles = [r.post_recv(r.ctx.register(d)) for d in dsts]
    handles += [s.write(s.ctx.register(x)) for x in srcs]
    wait_all(handles, timeout=120)
    return srcs, dsts


def test_switches_to_ec_under_loss_and_back_with_intact_bytes():
    net = InprocNetwork(seed=5, clock=ManualClock(), delay=RTT / 2)
    s, r, policy = rpair(net)
    for phase, drop in enumerate((0.0, 0.04, 0.0, 0.0)):
        net.faults = dataclasses.replace(net.faults, drop=drop)
        srcs, dsts = send(s, r, [150_000] * 8, seed=100 * phase)
        assert all(np.array_equal(x, y) for x, y in zip(srcs, dsts, strict=True))
    path = [(sw.old, sw.new) for sw in policy.switches]
    assert path == [(SR, MDS), (MDS, SR)]
    assert policy.choices[SR] > 0 and policy.choices[MDS] > 0
    # both ends ran the same member per message: the receiver counted its choices too
    assert r.counters["receive_adaptive_ec-mds(8,2)"] == s.counters["write_adaptive_ec-mds(8,2)"]
    assert r.counters["sent_lossreport"] == 32
    est = policy.estimator.estimate()
    assert est.rtt == pytest.approx(RTT, rel=0.2)


def test_an_adaptive_receive_says_whether_it_has_a_hole():
    # the driver's hold asks every posted receive (ReceiveSide.gapped) on transports
    # that can hold (UDP): an adaptive receive answered with an AttributeError before
    net = InprocNetwork(seed=5, clock=ManualClock(), delay=RTT / 2)
    s, r, _ = rpair(net)
    dst = np.zeros(150_000, dtype=np.uint8)
    handle = r.post_recv(r.ctx.register(dst))
    r.progress()
    assert r.connection.receives.gapped() is False  # no member yet: no hole
    src = random_bytes(150_000, seed=3)
    wait_all([handle, s.write(s.ctx.register(src))], timeout=120)
    assert np.array_equal(src, dst) and r.connection.receives.gapped() is False


def test_receiver_asks_for_a_lost_digest():
    dropped = []

    def lose_first_digest(data, index):  # the announcement and the whole one
        if len(dropped) < 2 and data[:1] == bytes([Digest.TYPE]):
            dropped.append(index)
            return True
        return False

    net = scripted(drop_control=lose_first_digest)
    s, r, _ = rpair(net)
    srcs, dsts = send(s, r, [100_000], seed=3)
    assert np.array_equal(srcs[0], dsts[0])
    assert dropped
    assert s.counters["received_sack"] >= 1  # the receiver's digest request


def test_candidates_must_agree():
    net = InprocNetwork(seed=1, clock=ManualClock(), delay=RTT / 2)
    s, r, _ = rpair(net, sender_cands=(XOR, SR), receiver_cands=(SR, MDS))
    dst = np.zeros(50_000, dtype=np.uint8)
    rh = r.post_recv(r.ctx.register(dst))
    wh = s.write(s.ctx.register(random_bytes(50_000)))
    with pytest.raises((ProtocolError, sdr.MessageFailed)):
        wait_all([wh, rh], timeout=30)
    assert rh.finished and rh.error is not None
    assert isinstance(rh.error, ProtocolError) and "adaptive candidates" in str(rh.error)


def test_an_adaptive_write_shares_the_connections_rtt_estimator():
    # the connection hands each new write its RTT estimator (what the others measured);
    # the adaptive proxy kept it for itself and the member ran a fresh one at the
    # configured RTO: spurious RTOs on a real link, and no sample reached the connection
    net = InprocNetwork(seed=5, clock=ManualClock(), delay=RTT / 2)
    s, r, _ = rpair(net)
    dst = np.zeros(150_000, dtype=np.uint8)
    rh = r.post_recv(r.ctx.register(dst))
    wh = s.write(s.ctx.register(random_bytes(150_000, seed=4)))
    for _ in range(50):
        s.progress()
        r.progress()
        if s.connection.writes.sending:
            break
    (out,) = s.connection.writes.sending.values()
    assert out.machine.rtt is out.machine.inner.rtt is s.connection.rtt
    wait_all([rh, wh], timeout=120)


def test_an_adaptive_sender_names_its_scheme_before_the_first_whole_digest():
    # an adaptive receiver holds every chunk, and acknowledges none, until a DIGEST names
    # the member; a whole DIGEST covers 1014 chunks (0.27 s of 32 KiB chunks at 1 Gbit/s),
    # so the sender's first RTO fired and resent hundreds of chunks that had arrived
    length = (DIGEST_PER_MESSAGE + 10) * 4096
    data = memoryview(random_bytes(length, seed=2))
    geometry = MessageGeometry(length, 4096)
    plain = DigestBuilder(1, data, geometry, scheme=9)
    assert plain.step(16) == [] and plain.ready() == []
    early = DigestBuilder(1, data, geometry, scheme=9)
    early.announce = True
    (first,) = early.step(16)
    assert (first.first, len(first.crcs)) == (0, 16) and early.ready() == [first]
    assert early.step(16) == []  # once
    whole = early.step(DIGEST_PER_MESSAGE - 32)
    assert [(p.first, len(p.crcs)) for p in whole] == [(0, DIGEST_PER_MESSAGE)]
    assert early.ready() == whole and not early.done
    store = DigestStore(geometry, 9, "test")
    for piece in (first, *whole):
        store.add(piece)
    assert store.conflicts == 0 and store.known[:DIGEST_PER_MESSAGE].all()
    # the adaptive proxy turns it on for its member; the receiver binds at once
    net = InprocNetwork(seed=5, clock=ManualClock(), delay=RTT / 2)
    s, r, _ = rpair(net)
    dst = np.zeros(150_000, dtype=np.uint8)
    rh = r.post_recv(r.ctx.register(dst))
    wh = s.write(s.ctx.register(random_bytes(150_000, seed=4)))
    while not s.connection.writes.sending:
        s.progress()
        r.progress()
    (out,) = s.connection.writes.sending.values()
    assert out.machine.inner.digest.announce or out.machine.inner.digest.ready()
    wait_all([rh, wh], timeout=120)
