"""Peer faults across processes (UDP backend, loopback): killed mid-transfer, restarted.

The survivor gets a clear error within the global timeout, frees what the message held
(no in-flight write, no bound key-table entry) and can connect again; packets of a dead
incarnation never write into the new one's buffers.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import socket
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest

import sdr
from sdr.backends.udp import UdpTransport
from sdr.runtime import ReliableQP
from sdr.runtime.handles import drive

ATTR = sdr.QPAttr(
    mtu=8192, chunk_size="64KiB", max_message_size="16MiB", channels=2, rate_limit="100Mbit/s"
)
CONFIG = {"scheme": "sr-rto", "rtt": "2ms", "global_timeout": "1.5s"}
BIG = 16 << 20  # ~1.4 s on the wire at the rate limit: long enough to die in the middle
SMALL = 1 << 20
GUARD = 0xA5
FAILED = (sdr.TimeoutError, sdr.TransportError)
_FORK = mp.get_context("fork")


def data(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def digest(buf: np.ndarray) -> str:
    return hashlib.sha256(buf.tobytes()).hexdigest()


def _peer(role: str, conn: Connection, port: int, size: int, seed: int) -> None:
    """A child process: one reliable write or receive, reported to the parent."""
    try:
        with sdr.Context(UdpTransport(port=port)) as ctx:
            qp = ctx.create_qp(ATTR)
            conn.send(qp.info())
            qp.connect(conn.recv())
            rqp = ReliableQP(qp, CONFIG)
            region = np.full(size + 8192, GUARD, dtype=np.uint8)
            if role == "send":
                region[4096 : 4096 + size] = data(size, seed)
                h = rqp.write(ctx.register(region), 4096, size)
            else:
                h = rqp.post_recv(ctx.register(region), 4096, size)
            drive([rqp], lambda: h.finished, 60)
            guard = bool((region[:4096] == GUARD).all() and (region[4096 + size :] == GUARD).all())
            report = {
                "error": repr(h.error) if h.error else None,
                "sha256": digest(region[4096 : 4096 + size]),
                "guard": guard,
                "counters": qp.counters(),
            }
            drive([rqp], conn.poll, 30)  # keep answering (a last ACK may be lost) until told
            conn.send(report)
    except BaseException as exc:  # a killed child sends nothing; others explain themselves
        conn.send({"crash": repr(exc)})


class Child:
    """A peer process and its pipe."""

    def __init__(self, role: str, size: int, seed: int, port: int = 0) -> None:
        self.conn, there = _FORK.Pipe()
        self.proc = _FORK.Process(target=_peer, args=(role, there, port, size, seed), daemon=True)
        self.proc.start()

    def info(self, rqps: list[ReliableQP] | None = None) -> bytes:
        if rqps:  # keep our other transfers moving while the child starts
            drive(rqps, lambda: self.conn.poll(), 30)
        assert self.conn.poll(30), "peer did not start"
        return self.conn.recv()

    def report(self, rqps: list[ReliableQP]) -> dict[str, Any]:
        self.conn.send("stop")
        drive(rqps, lambda: self.conn.poll(), 60)
        report = self.conn.recv()
        assert "crash" not in report, report
        return report

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(10)

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)


def connect(ctx: sdr.Context, child: Child, rqps: list[ReliableQP] | None = None) -> ReliableQP:
    qp = ctx.create_qp(ATTR)
    qp.connect(child.info(rqps))
    child.conn.send(qp.info())
    return ReliableQP(qp, CONFIG)


def sent_packets(rqp: ReliableQP) -> int:
    return rqp.qp.counters()["packets_sent"]


def test_receiver_killed_mid_transfer_sender_fails_cleanly_and_reconnects() -> None:
    children = [Child("recv", BIG, 0)]
    try:
        with sdr.Context(UdpTransport(port=0)) as ctx:
            rqp = connect(ctx, children[0])
            src = data(BIG, 1)
            h = rqp.write(ctx.register(src))
            drive([rqp], lambda: sent_packets(rqp) > 200, 30)
            children[0].kill()
            start = time.monotonic()
            with pytest.raises(FAILED):
                h.wait(timeout=30)
            assert time.monotonic() - start < 1.5 + 10  # the global timeout, generously
            assert not h.done and isinstance(h.error, sdr.TimeoutError), h.error
            for _ in range(20):
                rqp.progress()
            assert rqp.in_flight == 0 and rqp.qp.core.send.in_flight == 0
            assert rqp.qp.transport_qp.keys.bound_count() == 0
            # a new peer process: new QP, new QPNs and rkeys, same local context
            children.append(Child("recv", SMALL, 0))
            again = connect(ctx, children[1])
            small = data(SMALL, 2)
            again.write(ctx.register(small)).wait(timeout=30)
            report = children[1].report([again])
            assert report["error"] is None and report["sha256"] == digest(small)
            assert report["guard"]
            data_socket = ctx.transport.data_socket
        assert data_socket.fileno() == -1  # closing the context closed the sockets
    finally:
        for child in children:
            child.close()


def test_sender_killed_mid_transfer_receiver_fails_cleanly_and_reconnects() -> None:
    children = [Child("send", BIG, 3)]
    try:
        with sdr.Context(UdpTransport(port=0)) as ctx:
            rqp = connect(ctx, children[0])
            dst = np.zeros(BIG, dtype=np.uint8)
            h = rqp.post_recv(ctx.register(dst))
            drive([rqp], lambda: rqp.qp.counters()["packets_accepted"] > 200, 30)
            assert rqp.qp.transport_qp.keys.bound_count() > 0
            children[0].kill()
            with pytest.raises(FAILED):
                h.wait(timeout=30)
            assert not h.done
            assert not np.array_equal(dst, data(BIG, 3))  # it really was cut short
            for _ in range(20):
                rqp.progress()
            assert rqp.qp.transport_qp.keys.bound_count() == 0  # nothing can land any more
            children.append(Child("send", SMALL, 4))
            again = connect(ctx, children[1])
            small = np.zeros(SMALL, dtype=np.uint8)
            again.post_recv(ctx.register(small)).wait(timeout=30)
            assert np.array_equal(small, data(SMALL, 4))
            assert children[1].report([again])["error"] is None
    finally:
        for child in children:
            child.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_restarted_peer_never_takes_packets_of_its_previous_incarnation() -> None:
    port = _free_port()
    children = [Child("recv", BIG, 0, port=port)]
    try:
        with sdr.Context(UdpTransport(port=0)) as ctx:
            old = connect(ctx, children[0])
            h_old = old.write(ctx.register(data(BIG, 5)))
            drive([old], lambda: sent_packets(old) > 100, 30)
            children[0].kill()
            # same address, new process: new random QPNs and rkeys
            children.append(Child("recv", SMALL, 0, port=port))
            new = connect(ctx, children[1], [old])
            sent_before = sent_packets(old)
            small = data(SMALL, 6)
            h_new = new.write(ctx.register(small))
            drive([old, new], lambda: h_new.finished and h_old.finished, 60)
            assert h_new.done and not h_old.done
            assert sent_packets(old) > sent_before  # the old QP kept sending to that address
            report = children[1].report([new])
        assert report["error"] is None and report["sha256"] == digest(small)
        assert report["guard"]
        c = report["counters"]
        assert c["udp_unknown_qpn"] > 0  # the old incarnation's packets arrived: dropped
        assert c["bad_rkey"] == 0 and c["bad_source"] == 0
    finally:
        for child in children:
            child.close()
