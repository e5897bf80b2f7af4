"""The verbs backend on a real RDMA device (RoCE, InfiniBand, or soft-RoCE rxe).

Both ends open the same device and talk over loopback. Without a device every test
skips with the reason pyverbs gave ("no RDMA device: ...").
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

import sdr

pytestmark = pytest.mark.verbs


def _transport():
    from sdr.backends.verbs import VerbsTransport

    try:
        return VerbsTransport(host="127.0.0.1")
    except sdr.TransportError as exc:
        pytest.skip(str(exc) if "RDMA device" in str(exc) else f"no RDMA device: {exc}")


@pytest.fixture
def contexts() -> Iterator[tuple[sdr.Context, sdr.Context]]:
    a = sdr.Context(backend=_transport())
    b = sdr.Context(backend=_transport())
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _drive(a: sdr.Context, b: sdr.Context, done, what: str) -> None:
    deadline = time.monotonic() + 20.0  # liveness guard only
    while not done():
        a.progress()
        b.progress()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not finish")


def test_message_round_trip_over_channels(contexts) -> None:
    a, b = contexts
    attr = sdr.QPAttr(mtu=4096, chunk_size="16KiB", max_message_size="1MiB", channels=4)
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    src = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    rh = qb.post_recv(b.register(dst))
    qa.post_send(a.register(src), imm=0xC0FFEE)
    _drive(a, b, lambda: rh.record.arrived, "receive")
    assert rh.imm == 0xC0FFEE and np.array_equal(src, dst)
    rh.complete()


def test_late_writes_after_completion_do_not_land(contexts) -> None:
    a, b = contexts
    attr = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB", channels=2)
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    src = np.full(65536, 7, dtype=np.uint8)
    dst = np.zeros_like(src)
    ms, md = a.register(src), b.register(dst)
    rh = qb.post_recv(md)
    b.progress()  # binds the receive (registers its MR) and sends the CTS with its rkey
    rh.complete()  # early completion: the MR is deregistered before anything is sent
    b.progress()
    sh = qa.post_send(ms)
    _drive(a, b, sh.poll, "send")
    b.progress()
    assert not dst.any()
