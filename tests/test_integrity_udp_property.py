"""Property over real UDP between two processes: a reliable receive completes only with the
sender's exact bytes, whatever a hostile path does to the RoCEv2 datagrams.

The sender runs in a child process behind an adversarial relay (also in the child): it
forwards every datagram as a RoCE-aware middlebox would (ICRC checked, then recomputed for
the relayed addresses), and applies a drawn plan to each data packet: deliver, drop,
duplicate late, hold back, damage with a valid ICRC (a forger, or a middlebox that
damaged before resealing), damage with an invalid ICRC (the link), or replay a straggler
(an old datagram of an earlier message, unmodified), or deliver it and forge a
valid-looking damaged copy later. The receiver runs here, in the test
process. The id space is shrunk (48 receives per triple cycle) so stragglers can match.
"""

from __future__ import annotations

import heapq
import json
import multiprocessing as mp
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import sdr
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.roce import HEADER_SIZE, ICRC_SIZE, UC_RDMA_WRITE_ONLY_IMM
from sdr.backends.wan.udp_relay import RelayEnd, icrc_for
from sdr.runtime import ReliableQP
from sdr.runtime.handles import drive

ATTR = sdr.QPAttr(
    mtu=512,
    chunk_size=1024,
    max_message_size=16384,
    max_messages=3,
    generations=2,
    id_bits=4,
    offset_bits=24,
)
CONFIG = {"rtt": "5ms", "global_timeout": 2.0}
DELIVER, DROP, DUPLICATE, HOLD, FORGED, DAMAGED, STRAGGLER, FORGED_LATE = range(8)
LOCAL = ("127.0.0.1", 0)


def _through(info: bytes, data: tuple[str, int], control: tuple[str, int]) -> bytes:
    body = json.loads(info)
    body["transport"].update(host=data[0], port=data[1], control_port=control[1])
    return json.dumps(body).encode()


def _addresses(info: bytes) -> tuple[tuple[str, int], tuple[str, int]]:
    t = json.loads(info)["transport"]
    return (t["host"], t["port"]), (t["host"], t["control_port"])


def _sealed(packet: bytes, src: tuple[str, int], dst: tuple[str, int]) -> bytes:
    return packet[:-ICRC_SIZE] + struct.pack("<I", icrc_for(packet, src, dst))


class Adversary:
    """Sender -> receiver data through ``fwd`` (plan applied), everything else verbatim."""

    def __init__(self, plan: list[int], seed: int, sender: bytes, receiver: bytes) -> None:
        (s_data, s_ctl), (r_data, r_ctl) = _addresses(sender), _addresses(receiver)
        # each end faces one side (its target) and stands in for the other
        self.fwd, self.back = RelayEnd(LOCAL, s_data, reseal=True), RelayEnd(LOCAL, r_data)
        self.cfwd, self.cback = RelayEnd(LOCAL, s_ctl), RelayEnd(LOCAL, r_ctl)
        self.fwd.peer, self.back.peer = self.back, self.fwd
        self.cfwd.peer, self.cback.peer = self.cback, self.cfwd
        self.plan, self.rng, self.count = plan, np.random.default_rng(seed), 0
        self.held: list[tuple[float, int, bytes]] = []
        self.history: list[bytes] = []

    def for_sender(self, receiver_info: bytes) -> bytes:
        return _through(receiver_info, self.fwd.address, self.cfwd.address)

    def for_receiver(self, sender_info: bytes) -> bytes:
        return _through(sender_info, self.back.address, self.cback.address)

    def later(self, packet: bytes, delay: float) -> None:
        heapq.heappush(self.held, (time.monotonic() + delay, self.count, packet))

    def pump(self) -> None:
        for end in (self.back, self.cfwd, self.cback):
            for packet in end.read_many(64):
                assert end.peer is not None
                end.peer.write(packet)
        out = self.back  # data towards the receiver leaves through the back end's socket
        for packet in self.fwd.read_many(64):  # resealed for back -> receiver already
            if packet[0] != UC_RDMA_WRITE_ONLY_IMM or len(packet) <= HEADER_SIZE + ICRC_SIZE:
                out.write(packet)
                continue
            self.act(packet, out)
        now = time.monotonic()
        while self.held and self.held[0][0] <= now:
            out.write(heapq.heappop(self.held)[2])

    def act(self, packet: bytes, out: RelayEnd) -> None:
        action = self.plan[self.count % len(self.plan)]
        self.count += 1
        body = bytearray(packet)
        body[HEADER_SIZE] ^= 0xFF  # first payload byte
        if action == DELIVER:
            out.write(packet)
        elif action == DUPLICATE:
            out.write(packet)
            self.later(packet, 0.02 * self.rng.random())
        elif action == HOLD:
            self.later(packet, 0.01 * self.rng.random())
        elif action == FORGED:  # damaged, with an ICRC that is valid for the path
            out.write(_sealed(bytes(body), out.address, out.target))
            self.later(packet, 0.005 * self.rng.random())
        elif action == FORGED_LATE:  # the good copy first, a valid-looking forgery later
            out.write(packet)
            forged = _sealed(bytes(body), out.address, out.target)
            self.later(forged, 0.02 * self.rng.random())
        elif action == DAMAGED:  # damaged on the link after sealing: the ICRC catches it
            out.write(bytes(body))
            self.later(packet, 0.005 * self.rng.random())
        elif action == STRAGGLER:
            out.write(packet)
            if self.history:
                out.write(self.history[int(self.rng.integers(len(self.history)))])
        self.history.append(packet)  # DROP: only the straggler pool keeps it

    def close(self) -> None:
        for end in (self.fwd, self.back, self.cfwd, self.cback):
            end.sock.close()


def _sender(conn: Connection, plan: list[int], sizes: list[int], seed: int, scheme: str) -> None:
    try:
        with sdr.Context(backend=UdpTransport(port=0)) as ctx:
            qp = ctx.create_qp(ATTR)
            receiver_info = conn.recv()
            relay = Adversary(plan, seed, qp.info(), receiver_info)
            conn.send(relay.for_receiver(qp.info()))
            qp.connect(relay.for_sender(receiver_info))
            kw: dict[str, Any] = {"k": 4, "m": 2} if scheme.startswith("ec") else {}
            rqp = ReliableQP(qp, scheme, **CONFIG, **kw)
            rng = np.random.default_rng(seed)
            srcs = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
            [rqp.write(ctx.register(s)) for s in srcs]
            deadline = time.monotonic() + 60
            while not conn.poll(0) and time.monotonic() < deadline:
                rqp.progress()
                relay.pump()
            relay.close()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        conn.send({"error": repr(exc)})


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    scheme=st.sampled_from(["sr-rto", "sr-nack", "ec-mds", "ec-xor"]),
    plan=st.lists(st.integers(0, 7), min_size=1, max_size=24),
    sizes=st.lists(st.integers(1, 16384), min_size=1, max_size=10),
    seed=st.integers(0, 2**16),
)
def test_udp_receives_complete_only_with_the_senders_bytes(scheme, plan, sizes, seed) -> None:
    # a path that loses most packets only makes every message time out one after another
    # (2 s each, one in flight): slow, and nothing to learn about the bytes
    assume(2 * plan.count(DROP) <= len(plan))
    parent, child = mp.get_context("fork").Pipe()
    proc = mp.get_context("fork").Process(
        target=_sender, args=(child, plan, sizes, seed, scheme), daemon=True
    )
    with sdr.Context(backend=UdpTransport(port=0)) as ctx:
        qp = ctx.create_qp(ATTR)
        proc.start()
        try:
            parent.send(qp.info())
            assert parent.poll(30), "the sender did not start"
            info = parent.recv()
            assert not isinstance(info, dict), info
            qp.connect(info)
            kw: dict[str, Any] = {"k": 4, "m": 2} if scheme.startswith("ec") else {}
            rqp = ReliableQP(qp, scheme, **CONFIG, **kw)
            dsts = [np.zeros(n, dtype=np.uint8) for n in sizes]
            rhs = [rqp.post_recv(ctx.register(d)) for d in dsts]
            drive([rqp], lambda: all(h.finished for h in rhs), 90)
            for _ in range(100):  # let the last ACKs leave before the sender is told to stop
                rqp.progress()
        finally:
            parent.send("done")
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    rng = np.random.default_rng(seed)
    srcs = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    for src, dst, rh in zip(srcs, dsts, rhs, strict=True):
        if rh.error is None:
            assert np.array_equal(src, dst), f"receive {rh.seq} completed with wrong bytes"
        else:
            assert isinstance(rh.error, sdr.SDRError), rh.error
    if not {DROP, FORGED} & set(plan):  # nothing lost, no valid-looking damage: all complete
        assert [h.error for h in rhs] == [None] * len(rhs)
