"""Helpers of the reliability tests (two reliable QPs on one in-process wire), and their tests.

ScriptedNetwork drops or corrupts chosen packets exactly (by receive slot and byte offset),
so a test can say "lose these chunks" instead of hoping a seed does; BurstyNetwork drops
runs of consecutive data packets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import sdr
from sdr.backends.inproc import InprocNetwork, InprocTransport, ManualClock
from sdr.runtime import ReliableQP

RTT = 0.01
ATTR = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="2MiB", max_messages=64)

# predicate(slot, offset_in_slot, transmission_index) -> bool
PacketRule = Callable[[int, int, int], bool]


class ScriptedNetwork(InprocNetwork):
    """An in-process wire that drops/corrupts data packets chosen by a rule.

    The rule sees the receive slot, the byte offset within the slot and how many times a
    packet for that (slot, offset) was sent before (0: first transmission).
    """

    def __init__(
        self,
        slot_size: int,
        drop: PacketRule | None = None,
        corrupt: PacketRule | None = None,
        drop_control: Callable[[bytes, int], bool] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.slot_size = slot_size
        self.drop_rule = drop
        self.corrupt_rule = corrupt
        self.drop_control_rule = drop_control
        self.seen: dict[tuple[int, int], int] = {}
        self.control_seen = 0
        self.scripted_drops = 0

    def send(self, dst: int, item: Any, control: bool = False) -> None:
        if control:
            index = self.control_seen
            self.control_seen += 1
            if self.drop_control_rule and self.drop_control_rule(item, index):
                self.scripted_drops += 1
                return
        elif isinstance(item, tuple) and len(item[4]):
            gen, ch, roff, imm, payload = item
            slot, offset = divmod(roff, self.slot_size)
            n = self.seen.get((slot, offset), 0)
            self.seen[(slot, offset)] = n + 1
            if self.drop_rule and self.drop_rule(slot, offset, n):
                self.scripted_drops += 1
                return
            if self.corrupt_rule and self.corrupt_rule(slot, offset, n):
                payload = bytes([payload[0] ^ 0xFF]) + payload[1:]
                item = (gen, ch, roff, imm, payload)
        super().send(dst, item, control)


class BurstyNetwork(InprocNetwork):
    """Drops bursts: each data packet starts a burst of ``burst_len`` drops with ``p_burst``."""

    def __init__(self, p_burst: float, burst_len: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.p_burst = p_burst
        self.burst_len = burst_len
        self._left = 0
        self._burst_rng = np.random.default_rng(kw.get("seed", 0) + 1000)
        self.burst_drops = 0

    def send(self, dst: int, item: Any, control: bool = False) -> None:
        if not control:
            if self._left == 0 and self._burst_rng.random() < self.p_burst:
                self._left = self.burst_len
            if self._left:
                self._left -= 1
                self.burst_drops += 1
                return
        super().send(dst, item, control)


@dataclass
class RPair:
    net: InprocNetwork
    clock: ManualClock
    s: ReliableQP  # writes
    r: ReliableQP  # receives


def make_rpair(
    scheme: str = "sr-rto",
    attr: sdr.QPAttr = ATTR,
    net: InprocNetwork | None = None,
    seed: int = 1,
    delay: float = RTT / 2,
    **kw: Any,
) -> RPair:
    """Two reliable QPs of ``scheme`` over a fresh wire with a ManualClock (RTT = 10 ms)."""
    if net is None:
        net = InprocNetwork(seed=seed, clock=ManualClock(), delay=delay)
    clock = net.clock
    assert isinstance(clock, ManualClock)
    a = sdr.Context(InprocTransport(net))
    b = sdr.Context(InprocTransport(net))
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    kw.setdefault("rtt", RTT)
    return RPair(net, clock, ReliableQP(qa, scheme, **kw), ReliableQP(qb, scheme, **kw))


def scripted(drop: PacketRule | None = None, **kw: Any) -> ScriptedNetwork:
    """A ScriptedNetwork for ATTR with a ManualClock and RTT/2 one-way delay."""
    return ScriptedNetwork(
        ATTR.max_message_size, drop=drop, clock=ManualClock(), delay=RTT / 2, **kw
    )


def random_bytes(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def transfer(pair: RPair, sizes: list[int], timeout: float = 60.0) -> tuple[list, list, list]:
    """Post receives, write ``sizes`` messages, wait for all; returns (src, dst, handles)."""
    from sdr.runtime import wait_all

    srcs = [random_bytes(n, seed=i) for i, n in enumerate(sizes)]
    dsts = [np.zeros(n, dtype=np.uint8) for n in sizes]
    rhs = [pair.r.post_recv(pair.r.ctx.register(d)) for d in dsts]
    whs = [pair.s.write(pair.s.ctx.register(s)) for s in srcs]
    wait_all([*whs, *rhs], timeout=timeout)
    return srcs, dsts, whs + rhs


# --- tests of the helpers themselves --------------------------------------------------------
def test_scripted_network_drops_only_the_chosen_first_transmissions():
    net = scripted(drop=lambda slot, off, n: slot == 0 and off == 2048 and n == 0)
    pair = make_rpair(net=net)
    src, dst, handles = transfer(pair, [16 * 1024])
    assert (src[0] == dst[0]).all()
    assert net.scripted_drops == 1
    assert handles[0].retransmissions == 1  # 4 KiB chunks: chunk 0 holds offset 2048


def test_bursty_network_drops_runs():
    net = BurstyNetwork(0.05, 6, seed=3, clock=ManualClock(), delay=RTT / 2)
    pair = make_rpair(net=net)
    src, dst, _ = transfer(pair, [128 * 1024])
    assert (src[0] == dst[0]).all()
    assert net.burst_drops >= 6
