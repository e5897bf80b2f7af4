"""Erasure Coding over the in-process transport: at most m losses per submessage never
retransmit; more fall back to SR for exactly the missing data chunks; every message ends
with verified bytes."""

from __future__ import annotations

import numpy as np
import pytest
from test_reliability_support import (
    ATTR,
    RTT,
    BurstyNetwork,
    make_rpair,
    random_bytes,
    scripted,
    transfer,
)

import sdr
from sdr.backends.inproc import InprocNetwork, ManualClock
from sdr.runtime import ReliableQP, wait_all

CS = 4096  # chunk size of ATTR
K, M = 8, 2
SCHEMES = ["ec-mds", "ec-xor"]


def ec_pair(scheme, net=None, **kw):
    kw.setdefault("k", K)
    kw.setdefault("m", M)
    return make_rpair(scheme, net=net, **kw)


def data_chunk(slot: int, off: int) -> int | None:
    """Chunk index of a packet of the first message's data lane (slot 0), else None."""
    return off // CS if slot == 0 else None


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("drop", [0.0, 0.01, 0.05, 0.1, 0.2])
def test_messages_complete_with_correct_bytes_under_loss(scheme, drop):
    net = InprocNetwork(seed=13, clock=ManualClock(), delay=RTT / 2, drop=drop, control_drop=drop)
    pair = ec_pair(scheme, net=net)
    srcs, dsts, handles = transfer(pair, [150_000, 4096, 1, 70_000])
    assert all((s == d).all() for s, d in zip(srcs, dsts, strict=True))
    if drop == 0:
        assert sum(h.retransmissions for h in handles[:4]) == 0


def test_mds_with_m_losses_per_submessage_never_retransmits():
    # 10 submessages of 8 data chunks; lose data chunks 1 and 6 of every submessage
    lost = {s * K + j for s in range(10) for j in (1, 6)}
    net = scripted(lambda slot, off, n: data_chunk(slot, off) in lost)  # every transmission
    pair = ec_pair("ec-mds", net=net)
    srcs, dsts, handles = transfer(pair, [10 * K * CS])
    assert (srcs[0] == dsts[0]).all()
    write, recv = handles
    assert write.retransmissions == 0
    assert recv.stats["chunks_decoded"] == len(lost)
    assert "fallbacks" not in recv.stats and "sent_ecnack" not in recv.stats


def test_mds_with_data_and_parity_losses_up_to_m():
    # submessage 0: one data + one parity chunk lost (parity lane is slot 1)
    net = scripted(
        lambda slot, off, n: (slot == 0 and off // CS == 3) or (slot == 1 and off // CS == 0)
    )
    pair = ec_pair("ec-mds", net=net)
    srcs, dsts, handles = transfer(pair, [3 * K * CS - 100])  # short last chunk
    assert (srcs[0] == dsts[0]).all()
    assert handles[0].retransmissions == 0
    assert handles[1].stats["chunks_decoded"] == 1


def test_xor_with_one_loss_per_group_never_retransmits():
    # k=8, m=2: groups are even and odd chunks; lose one of each in every submessage
    lost = {s * K + j for s in range(4) for j in (2, 5)}
    net = scripted(lambda slot, off, n: data_chunk(slot, off) in lost)
    pair = ec_pair("ec-xor", net=net)
    srcs, dsts, handles = transfer(pair, [4 * K * CS])
    assert (srcs[0] == dsts[0]).all()
    assert handles[0].retransmissions == 0
    assert handles[1].stats["chunks_decoded"] == len(lost)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_more_than_m_losses_fall_back_to_sr_for_exactly_the_missing_chunks(scheme):
    # submessage 1 loses 3 data chunks (first transmission only): undecodable for both codes
    lost = {K + 0, K + 2, K + 4}
    net = scripted(lambda slot, off, n: data_chunk(slot, off) in lost and n == 0)
    pair = ec_pair(scheme, net=net)
    srcs, dsts, handles = transfer(pair, [4 * K * CS])
    assert (srcs[0] == dsts[0]).all()
    write, recv = handles
    assert write.retransmissions == len(lost)
    assert write.stats["chunks_sent_lane1"] == 4 * M  # parity is never resent
    assert recv.stats["fallbacks"] == 1 and recv.stats["failed_submessages"] == 1


def test_fallback_repairs_repeated_losses_with_rto():
    # the first two transmissions of one chunk are lost: EC_NACK, then an RTO
    lost = {K + 1, K + 3, K + 5}
    net = scripted(lambda slot, off, n: data_chunk(slot, off) in lost and n < 2)
    pair = ec_pair("ec-mds", net=net, m=1)
    srcs, dsts, handles = transfer(pair, [3 * K * CS])
    assert (srcs[0] == dsts[0]).all()
    assert handles[0].retransmissions == 2 * len(lost)
    assert handles[0].stats["rto_expired"] >= len(lost)


def test_paced_link_fto_waits_for_the_whole_message():
    # 2 MiB of data + parity at 200 Mbit/s take ~100 ms >> RTT; losses <= m per submessage
    # must still be decoded, not NACKed: FTO counts the injection time
    attr = ATTR.replace(rate_limit="200Mbit/s")
    lost = {s * 32 + 7 for s in range(16)}
    net = scripted(lambda slot, off, n: data_chunk(slot, off) in lost)
    pair = make_rpair("ec-mds", attr=attr, net=net, k=32, m=4)
    srcs, dsts, handles = transfer(pair, [512 * CS])
    assert (srcs[0] == dsts[0]).all()
    assert handles[0].retransmissions == 0
    assert "fallbacks" not in handles[1].stats


@pytest.mark.parametrize("scheme", SCHEMES)
def test_ack_loss_reordering_and_duplicates(scheme):
    net = InprocNetwork(
        seed=21,
        clock=ManualClock(),
        delay=RTT / 2,
        drop=0.03,
        control_drop=0.3,
        reorder=0.1,
        duplicate=0.1,
    )
    pair = ec_pair(scheme, net=net)
    srcs, dsts, _ = transfer(pair, [200_000, 60_000, 9000])
    assert all((s == d).all() for s, d in zip(srcs, dsts, strict=True))


def test_bursts_beyond_m_are_repaired():
    net = BurstyNetwork(0.01, 10, seed=8, clock=ManualClock(), delay=RTT / 2)
    pair = ec_pair("ec-mds", net=net)
    srcs, dsts, _ = transfer(pair, [400_000, 100_000])
    assert all((s == d).all() for s, d in zip(srcs, dsts, strict=True))
    assert net.burst_drops >= 10


def test_lost_parity_cts_does_not_stall():
    # the second CTS (the parity lane of message 0) is lost
    cts_seen = []

    def drop_second_cts(data: bytes, index: int) -> bool:
        if data[0] != 1:
            return False
        cts_seen.append(index)
        return len(cts_seen) == 2

    net = scripted(drop_control=drop_second_cts)
    pair = ec_pair("ec-mds", net=net)
    srcs, dsts, _ = transfer(pair, [40 * CS, 20 * CS])
    assert all((s == d).all() for s, d in zip(srcs, dsts, strict=True))
    assert net.scripted_drops == 1


def test_corrupted_chunk_is_repaired():
    net = scripted(corrupt=lambda slot, off, n: slot == 0 and off == 5 * CS and n == 0)
    pair = ec_pair("ec-xor", net=net)
    srcs, dsts, handles = transfer(pair, [2 * K * CS])
    assert (srcs[0] == dsts[0]).all()
    assert handles[1].stats["bad_chunks"] == 1


def test_many_messages_in_flight():
    pair = ec_pair("ec-mds", max_in_flight=4)
    pair.net.faults = type(pair.net.faults)(drop=0.05, delay=RTT / 2)
    srcs, dsts, _ = transfer(pair, [5000 * (i + 1) for i in range(12)])
    assert all((s == d).all() for s, d in zip(srcs, dsts, strict=True))


def test_scheme_mismatch_is_a_protocol_error():
    pair = make_rpair("ec-mds", k=K, m=M)
    pair.r.scheme.fingerprint ^= 1  # as if the receiver were configured differently
    rh = pair.r.post_recv(pair.r.ctx.register(np.zeros(5000, dtype=np.uint8)))
    wh = pair.s.write(pair.s.ctx.register(random_bytes(5000)))
    with pytest.raises(Exception):  # noqa: B017 - checked below
        wait_all([wh, rh], timeout=10)
    assert "reliability scheme differs" in str(rh.error)
    assert wh.error is not None


def test_peers_with_different_parity_counts_fail_with_a_protocol_error():
    pair = make_rpair("ec-mds", k=K, m=M)
    receiver = ReliableQP(pair.r.qp, "ec-mds", rtt=RTT, k=K, m=M + 2)
    rh = receiver.post_recv(receiver.ctx.register(np.zeros(20 * CS, dtype=np.uint8)))
    wh = pair.s.write(pair.s.ctx.register(random_bytes(20 * CS)))
    with pytest.raises(sdr.ProtocolError):
        wait_all([wh, rh], timeout=10)
    assert "scheme, k, m or chunk size differ" in str(wh.error)
    assert isinstance(rh.error, sdr.ProtocolError)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_one_chunk_message_goes_as_selective_repeat_without_parity(scheme):
    """m parity chunks of a whole chunk each for a few bytes (a deadline allreduce's
    note): the parity lane of a one-chunk message is empty, its machines are Selective
    Repeat's, and a lost packet is repaired (here its only copy: small_copies=1)."""
    pair = ec_pair(scheme)
    assert pair.s.scheme.lanes(CS) == (CS, 0) and pair.s.scheme.lanes(16) == (16, 0)
    assert pair.s.scheme.lanes(CS + 1) == (CS + 1, M * CS)  # two chunks: parity as before
    view = memoryview(bytearray(16))
    assert type(pair.s.scheme.sender(0, view)) is sdr.reliability.SelectiveRepeatSender
    assert type(pair.s.scheme.receiver(0, view)) is sdr.reliability.SelectiveRepeatReceiver
    first = {"dropped": False}

    def drop_first(slot: int, off: int, n: int) -> bool:
        hit = slot == 0 and not first["dropped"]
        first["dropped"] = first["dropped"] or hit
        return hit

    net = scripted(drop_first)
    pair = ec_pair(scheme, net=net)
    srcs, dsts, handles = transfer(pair, [16, CS])
    assert all((s == d).all() for s, d in zip(srcs, dsts, strict=True))
    assert first["dropped"] and handles[0].retransmissions == 1
    assert "submessages_encoded" not in handles[0].stats


def test_chunks_ec_rebuilt_are_read_not_taken_from_packet_checksums():
    """Only bytes that came as packets have a placed checksum: a chunk the EC receiver
    rebuilt itself is read when checked, whatever the receive's packet sums say."""
    from sdr.reliability import create_scheme
    from sdr.reliability.config import ReliabilityConfig

    scheme = create_scheme(ReliabilityConfig(scheme="ec-mds", k=4, m=2, chunk_size=1024))
    receiver = scheme.receiver(0, memoryview(bytearray(8 * 1024)))
    receiver.use_packet_sums(1, lambda chunks: np.zeros(len(chunks), np.int64))  # parity lane
    assert receiver.placed_sums(np.arange(8)) is None
    receiver.use_packet_sums(0, lambda chunks: np.full(len(chunks), 5, np.int64))
    receiver.recovered[[2, 6]] = True
    assert receiver.placed_sums(np.arange(8)).tolist() == [5, 5, -1, 5, 5, 5, -1, 5]
