"""The schemes over the UDP backend (software RoCEv2 on loopback, real clock): the same
state machines as over the in-process wire, so only correctness is checked here."""

from __future__ import annotations

import numpy as np
import pytest

import sdr
from sdr.runtime import ReliableQP, wait_all

udp = pytest.importorskip("sdr.backends.udp")

ATTR = sdr.QPAttr(
    mtu=4096, chunk_size="16KiB", max_message_size="1MiB", rate_limit="2Gbit/s", channels=2
)


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack", "ec-mds", "ec-xor"])
def test_messages_arrive_verified_over_udp(scheme):
    ta, tb = udp.UdpTransport(port=0, seed=1), udp.UdpTransport(port=0, seed=2)
    a, b = sdr.Context(backend=ta), sdr.Context(backend=tb)
    try:
        qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
        qa.connect(qb.info())
        qb.connect(qa.info())
        cfg = {"rtt": "5ms", "k": 8, "m": 2}
        s, r = ReliableQP(qa, scheme, **cfg), ReliableQP(qb, scheme, **cfg)
        rng = np.random.default_rng(3)
        srcs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (300_000, 1, 65_536, 1 << 20)]
        dsts = [np.zeros_like(x) for x in srcs]
        handles = [r.post_recv(b.register(d)) for d in dsts]
        handles += [s.write(a.register(x)) for x in srcs]
        wait_all(handles, timeout=60)
        for x, d in zip(srcs, dsts, strict=True):
            assert (x == d).all()
    finally:
        a.close()
        b.close()
