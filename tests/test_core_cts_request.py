"""The core owns its CTS timer: a lost CTS is asked for again, by the core, with backoff."""

from __future__ import annotations

import pytest

import sdr
from sdr.actions import SendControl
from sdr.control import (
    CTS_REQUEST_TYPE,
    CTS_TYPE,
    decode_cts,
    decode_cts_request,
    encode_cts_request,
)
from sdr.errors import ProtocolError

ATTR = sdr.QPAttr(mtu=1024, chunk_size=1024, max_message_size=65536)


def _region(n: int) -> sdr.MemoryRegion:
    return sdr.MemoryRegion(key=1, view=memoryview(bytearray(n)))


def _controls(core: sdr.QueuePairCore) -> list[bytes]:
    return [a.data for a in core.actions_to_do() if isinstance(a, SendControl)]


def test_a_lost_cts_is_requested_again_and_answered() -> None:
    sender, receiver = sdr.QueuePairCore(ATTR), sdr.QueuePairCore(ATTR)
    rec = sender.stream_start(0.0, cts_retry=0.1)
    sender.stream_send(0.0, rec, _region(4096), 0, 0, 4096)
    sender.stream_end(0.0, rec)
    receiver.post_recv(0.0, _region(4096))
    assert [d[0] for d in _controls(receiver)] == [CTS_TYPE]  # ... and the link loses it
    assert sender.get_timer() == pytest.approx(0.1)
    sender.handle_timer(0.05)
    assert _controls(sender) == []  # not yet
    sender.handle_timer(0.1)
    (request,) = _controls(sender)
    assert request[0] == CTS_REQUEST_TYPE and decode_cts_request(request) == 0
    receiver.receive_control(0.11, request)
    (cts,) = _controls(receiver)
    assert decode_cts(cts).seq == 0 and receiver.counters.cts_resent == 1
    sender.receive_control(0.12, cts)
    sent = sender.writes_to_send(0.12, 100)
    assert sum(len(b) for b in sent) == 8  # 4 data packets, 4 with the rest of the imm
    assert sender.get_timer() is None  # the CTS is there: no more requests


def test_requests_back_off_doubling_up_to_sixteen_times() -> None:
    sender = sdr.QueuePairCore(ATTR)
    sender.post_send(0.0, _region(1024), cts_retry=1.0)
    asked = []
    now = 0.0
    for _ in range(8):
        now = sender.get_timer()
        sender.handle_timer(now)
        assert len(_controls(sender)) == 1
        asked.append(now)
    gaps = [round(b - a, 6) for a, b in zip(asked, asked[1:], strict=False)]
    assert gaps == [2.0, 4.0, 8.0, 16.0, 16.0, 16.0, 16.0]
    assert sender.counters.cts_requests_sent == 8


def test_no_retry_means_no_request() -> None:
    sender = sdr.QueuePairCore(ATTR)
    sender.post_send(0.0, _region(1024))
    assert sender.get_timer() is None
    sender.handle_timer(100.0)
    assert _controls(sender) == []


def test_a_request_for_a_receive_not_posted_or_over_is_ignored() -> None:
    receiver = sdr.QueuePairCore(ATTR)
    receiver.receive_control(0.0, encode_cts_request(7))  # never posted
    rec = receiver.post_recv(0.0, _region(1024))
    receiver.complete_recv(0.0, rec)
    receiver.actions_to_do()
    receiver.receive_control(0.0, encode_cts_request(0))  # over
    assert _controls(receiver) == [] and receiver.counters.cts_resent == 0


@pytest.mark.parametrize(
    "data",
    [encode_cts_request(1)[:-1], encode_cts_request(1) + b"x", b"\x02\x09" + bytes(14)],
)
def test_malformed_requests_are_counted_not_raised(data: bytes) -> None:
    receiver = sdr.QueuePairCore(ATTR)
    with pytest.raises(ProtocolError):
        decode_cts_request(data)
    receiver.receive_control(0.0, data)
    assert receiver.counters.control_malformed == 1


def test_a_cts_keeps_when_it_came_whether_before_or_after_the_send() -> None:
    # the deadline allreduce dates a peer's entry by its clear-to-send's arrival
    sender, receiver = sdr.QueuePairCore(ATTR), sdr.QueuePairCore(ATTR)
    receiver.post_recv(0.0, _region(4096))
    receiver.post_recv(0.0, _region(4096), cts_copies=2)  # a tiny one: twice
    first, second, again = _controls(receiver)
    assert decode_cts(second) == decode_cts(again)
    sender.receive_control(0.25, first)  # before the send was posted: kept for it
    early = sender.stream_start(0.5)
    assert early.remote is not None and early.cts_at == 0.25
    late = sender.stream_start(0.5)
    assert late.remote is None and late.cts_at is None
    sender.receive_control(0.75, second)
    sender.receive_control(0.8, again)  # the copy changes nothing
    assert late.remote == decode_cts(second) and late.cts_at == 0.75
