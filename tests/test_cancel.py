"""Cancelling a reliable write and its receive mid-flight (both ends agree to drop it):
both fail with Cancelled, nothing more of it is sent, and the next message on the same
QPs is placed and verified as if nothing happened."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import sdr
from sdr.backends.udp import UdpTransport
from sdr.errors import Cancelled, ConfigError
from sdr.runtime import ReliableQP
from sdr.runtime.handles import drive

ATTR = sdr.QPAttr(
    mtu=8192, chunk_size="64KiB", max_message_size="8MiB", channels=1, rate_limit="200Mbit/s"
)
SIZE = 8 << 20  # 0.34 s at the rate limit: still in flight when cancelled


@pytest.fixture
def pair() -> Iterator[tuple[ReliableQP, ReliableQP]]:
    a, b = sdr.Context(UdpTransport(port=0)), sdr.Context(UdpTransport(port=0))
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    qa.connect(qb.info())
    qb.connect(qa.info())
    config = {"scheme": "sr-nack", "rtt": "2ms", "max_in_flight": 2}
    try:
        yield ReliableQP(qa, config), ReliableQP(qb, config)
    finally:
        a.close()
        b.close()


def test_a_cancelled_message_stops_and_the_next_one_arrives_intact(
    pair: tuple[ReliableQP, ReliableQP],
) -> None:
    ra, rb = pair
    src = np.random.default_rng(1).integers(0, 256, 2 * SIZE, dtype=np.uint8)
    dst = np.zeros(2 * SIZE, dtype=np.uint8)
    mra, mrb = ra.ctx.register(src), rb.ctx.register(dst)
    first_recv = rb.post_recv(mrb, 0, SIZE)
    first = ra.write(mra, 0, SIZE)
    drive([ra, rb], lambda: dst[: SIZE // 4].any(), 10, "a quarter of the first message")
    assert not first_recv.finished and not first.finished
    assert ra.cancel(first) and rb.cancel(first_recv)
    for handle in (first, first_recv):
        with pytest.raises(Cancelled, match="cancelled"):
            handle.wait(0)
    sent = ra.qp.counters()["packets_sent"]
    second_recv = rb.post_recv(mrb, SIZE, SIZE)
    second = ra.write(mra, SIZE, SIZE)
    drive([ra, rb], lambda: second.finished and second_recv.finished, 20, "the second message")
    assert second.done and second_recv.done
    assert np.array_equal(dst[SIZE:], src[SIZE : 2 * SIZE])
    # only the second message's packets went after the cancel (no repairs of the first)
    assert ra.qp.counters()["packets_sent"] - sent <= SIZE // 8192 + 64
    assert not ra.cancel(second) and not rb.cancel(second_recv)  # finished: nothing to do


def test_a_write_waiting_for_a_slot_cannot_be_cancelled(
    pair: tuple[ReliableQP, ReliableQP],
) -> None:
    ra, _ = pair
    mr = ra.ctx.register(np.zeros(3 * 4096, np.uint8))
    ra.write(mr, 0, 4096)
    ra.write(mr, 4096, 4096)
    waiting = ra.write(mr, 8192, 4096)  # max_in_flight = 2
    with pytest.raises(ConfigError, match="raise max_in_flight"):
        ra.cancel(waiting)


def test_a_handle_of_another_qp_is_refused(pair: tuple[ReliableQP, ReliableQP]) -> None:
    ra, rb = pair
    handle = rb.post_recv(rb.ctx.register(np.zeros(4096, np.uint8)), 0, 4096)
    with pytest.raises(ConfigError, match="another reliable QP"):
        ra.cancel(handle)
