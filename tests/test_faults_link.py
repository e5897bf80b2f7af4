"""A link that goes dark for longer than the global timeout, mid-transfer (no root).

Both ends talk over the UDP backend through the WAN emulator's relay (RelayLink): a
message is cut by a blackout that outlasts the global timeout. Both sides must fail it
with a clear error (never report it complete), release its resources, and carry the
next message correctly once the link is back, on the same QPs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

import sdr
from sdr.backends.udp import UdpTransport
from sdr.backends.wan import LinkSpec, RelayLink
from sdr.runtime import ReliableQP
from sdr.runtime.handles import drive

ATTR = sdr.QPAttr(
    mtu=8192, chunk_size="64KiB", max_message_size="8MiB", channels=1, rate_limit="100Mbit/s"
)
TIMEOUT_S = 1.5
BLACKOUT = (0.25, 5.0)  # seconds after the first packet: longer than the global timeout


@dataclass
class Link:
    a: sdr.Context
    b: sdr.Context
    ra: ReliableQP
    rb: ReliableQP
    relay: RelayLink


def _through(info: bytes, data: tuple[str, int], control: tuple[str, int]) -> bytes:
    """Peer info rewritten to reach the peer through the relay's stand-in ports."""
    body = json.loads(info)
    body["transport"].update(host=data[0], port=data[1], control_port=control[1])
    return json.dumps(body).encode()


@pytest.fixture
def link() -> Iterator[Link]:
    a, b = sdr.Context(UdpTransport(port=0)), sdr.Context(UdpTransport(port=0))
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    ports = [(t.host, p) for t in (a.transport, b.transport) for p in (t.port, t.control_port)]
    spec = LinkSpec(rate="1Gbit/s", rtt="2ms", blackouts=(BLACKOUT,), seed=3)
    relay = RelayLink(spec, a_ports=ports[:2], b_ports=ports[2:], reseal=True)
    with relay:
        qa.connect(_through(qb.info(), relay.for_a(0), relay.for_a(1)))
        qb.connect(_through(qa.info(), relay.for_b(0), relay.for_b(1)))
        config = {"scheme": "sr-nack", "rtt": "2ms", "global_timeout": TIMEOUT_S}
        try:
            yield Link(a, b, ReliableQP(qa, config), ReliableQP(qb, config), relay)
        finally:
            a.close()
            b.close()


def _data(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def test_blackout_longer_than_the_global_timeout_fails_both_sides_then_recovers(
    link: Link,
) -> None:
    ra, rb = link.ra, link.rb
    big = _data(8 << 20, 1)  # ~0.7 s at the rate limit: the blackout cuts it
    dst = np.zeros_like(big)
    w = ra.write(link.a.register(big))
    r = rb.post_recv(link.b.register(dst))
    start = link.a.now()
    drive([ra, rb], lambda: w.finished and r.finished, 30)
    elapsed = link.a.now() - start
    assert not w.done and not r.done  # nothing incomplete is reported complete
    assert isinstance(w.error, sdr.TimeoutError), w.error
    assert isinstance(r.error, sdr.TimeoutError | sdr.MessageFailed), r.error
    assert "timeout" in str(r.error) or "gave" in str(r.error)
    assert elapsed < BLACKOUT[1]  # failed while the link was still dark
    assert not np.array_equal(dst, big)
    assert ra.in_flight == 0
    assert rb.qp.transport_qp.keys.bound_count() == 0  # its buffer can no longer be written
    # wait for the link to come back, then the same QPs carry the next message
    drive([ra, rb], lambda: link.a.now() - start > BLACKOUT[1] + 0.5, 30)
    small = _data(1 << 20, 2)
    out = np.zeros_like(small)
    w2 = ra.write(link.a.register(small))
    r2 = rb.post_recv(link.b.register(out))
    drive([ra, rb], lambda: w2.finished and r2.finished, 30)
    assert w2.done and r2.done, (w2.error, r2.error)
    assert np.array_equal(out, small)
    assert link.relay.alive  # it all went through the emulator
