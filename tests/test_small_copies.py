"""``ReliabilityConfig.small_copies``: a message of one chunk goes out that many times, so
one lost packet costs nothing (not an RTO); longer messages go out once."""

from __future__ import annotations

import numpy as np
import pytest
from test_reliability_support import RTT, make_rpair, scripted, transfer

from sdr.control import CTS_TYPE, message_type
from sdr.errors import ConfigError
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.messages import Digest, decode_message, is_reliability_message
from sdr.runtime import wait_all

ONE_CHUNK = 4096  # ATTR's chunk: 4 packets of 1 KiB


def _first_packet_lost(slot: int, offset: int, n: int) -> bool:
    return slot == 0 and offset == 0 and n == 0


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack"])
def test_a_lost_packet_of_a_one_chunk_message_is_covered_by_its_copy(scheme: str) -> None:
    net = scripted(drop=_first_packet_lost)
    pair = make_rpair(scheme, net=net, small_copies=2)
    start = pair.clock()
    src, dst, handles = transfer(pair, [ONE_CHUNK])
    assert (src[0] == dst[0]).all()
    assert net.scripted_drops == 1
    assert handles[0].retransmissions == 0
    assert pair.clock() - start < 2 * RTT  # one way and the ACK, no RTO (3 RTT)
    assert all(n == 2 for n in net.seen.values())  # every packet twice


def _first_digest_lost() -> tuple[object, list[int]]:
    """A control rule that drops the first DIGEST, and the list of DIGESTs seen."""
    seen: list[int] = []

    def rule(data: bytes, index: int) -> bool:
        if not (is_reliability_message(data) and isinstance(decode_message(data), Digest)):
            return False
        seen.append(index)
        return len(seen) == 1

    return rule, seen


@pytest.mark.parametrize(("copies", "digests"), [(2, 2), (1, 2)])
def test_a_lost_digest_of_a_one_chunk_message_is_covered_by_its_copy(
    copies: int, digests: int
) -> None:
    # the checksum goes out as often as the data: with one copy, its loss costs a SACK's
    # round trip and a resend (the deadline allreduce's notes waited a whole WAN RTT)
    rule, seen = _first_digest_lost()
    net = scripted(drop_control=rule)
    pair = make_rpair("sr-nack", net=net, small_copies=copies)
    start = pair.clock()
    src, dst, _ = transfer(pair, [ONE_CHUNK])
    assert (src[0] == dst[0]).all()
    assert len(seen) == digests  # two copies at once, or the first and its resend
    took = pair.clock() - start
    assert (took < 2 * RTT) if copies == 2 else (took >= 2 * RTT), took


@pytest.mark.parametrize("copies", [2, 1])
def test_a_lost_clear_to_send_of_a_one_chunk_receive_is_covered_by_its_copy(copies: int) -> None:
    # with one copy the sender waits for its CTS request (an RTO) before the write can
    # leave: a deadline allreduce's note waited 425 ms on a 100 ms link
    dropped: list[int] = []

    def first_cts(data: bytes, index: int) -> bool:
        if message_type(data) != CTS_TYPE or dropped:
            return False
        dropped.append(index)
        return True

    net = scripted(drop_control=first_cts)
    pair = make_rpair("sr-nack", net=net, small_copies=copies)
    start = pair.clock()
    src, dst, _ = transfer(pair, [ONE_CHUNK])
    assert (src[0] == dst[0]).all() and dropped
    took = pair.clock() - start
    assert (took < 2 * RTT) if copies == 2 else (took >= 2 * RTT), took


def test_without_copies_the_same_loss_costs_a_retransmission() -> None:
    net = scripted(drop=_first_packet_lost)
    pair = make_rpair("sr-rto", net=net)
    _, _, handles = transfer(pair, [ONE_CHUNK])
    assert handles[0].retransmissions == 1


def test_a_message_of_several_chunks_is_sent_once() -> None:
    net = scripted()
    pair = make_rpair("sr-rto", net=net, small_copies=2)
    src, dst, _ = transfer(pair, [2 * ONE_CHUNK])
    assert (src[0] == dst[0]).all()
    assert set(net.seen.values()) == {1}


@pytest.mark.parametrize("bad", [0, 5, True, 1.5])
def test_small_copies_is_a_small_count(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"small_copies must be an integer in 1\.\.4"):
        ReliabilityConfig(small_copies=bad)  # type: ignore[arg-type]


def test_flush_puts_a_cleared_write_on_the_wire_without_reading_arrivals() -> None:
    """``ReliableQP.flush``: the sending half of a round (a deadline's note must not wait
    behind the round that reads the late data first)."""
    pair = make_rpair("sr-nack")
    dst = np.zeros(ONE_CHUNK, np.uint8)
    rh = pair.r.post_recv(pair.r.ctx.register(dst))
    for _ in range(20):  # the clear-to-send reaches the writer
        pair.r.progress()
        pair.s.progress()
        pair.clock.advance(RTT / 4)
    src = np.full(ONE_CHUNK, 9, np.uint8)
    wh = pair.s.write(pair.s.ctx.register(src))
    assert not pair.s.sent(wh)

    def no_reading(*args: object) -> object:
        raise AssertionError("flush read what arrived")

    tqp = pair.s.qp.transport_qp
    tqp.poll_completions = no_reading  # type: ignore[method-assign]
    tqp.poll_control = no_reading  # type: ignore[method-assign]
    assert pair.s.flush() > 0
    assert pair.s.sent(wh)
    del tqp.poll_completions, tqp.poll_control
    wait_all([wh, rh], timeout=60)
    assert (dst == 9).all()
