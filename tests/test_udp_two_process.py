"""UDP backend across two processes on loopback: QP info goes through a pipe, data over UDP."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
from multiprocessing.connection import Connection

import numpy as np

import sdr
from sdr.backends.udp import UdpTransport

ATTR = sdr.QPAttr(
    mtu=8192, chunk_size="64KiB", max_message_size="4MiB", channels=4, rate_limit="2Gbit/s"
)
SIZES = [1, 8192, 100_000, 3 << 20]


def _payload(i: int, size: int) -> np.ndarray:
    return np.random.default_rng(100 + i).integers(0, 256, size, dtype=np.uint8)


def _receiver(conn: Connection) -> None:
    try:
        with sdr.Context(backend=UdpTransport(port=0)) as ctx:
            qp = ctx.create_qp(ATTR)
            conn.send(qp.info())
            qp.connect(conn.recv())
            bufs = [np.zeros(size, dtype=np.uint8) for size in SIZES]
            handles = [qp.post_recv(ctx.register(b)) for b in bufs]
            for h in handles:
                h.wait(timeout=30)
            for _ in range(200):  # let the sender see every CTS it still needs
                ctx.progress()
            conn.send(
                {
                    "digests": [hashlib.sha256(b.tobytes()).hexdigest() for b in bufs],
                    "imms": [h.imm for h in handles],
                    "counters": {**qp.counters(), **qp.transport_qp.stats},
                }
            )
    except Exception as exc:  # report to the parent rather than dying silently
        conn.send({"error": repr(exc)})


def test_write_between_two_processes() -> None:
    parent, child = mp.get_context("fork").Pipe()
    proc = mp.get_context("fork").Process(target=_receiver, args=(child,), daemon=True)
    proc.start()
    try:
        with sdr.Context(backend=UdpTransport(port=0)) as ctx:
            qp = ctx.create_qp(ATTR)
            assert parent.poll(30), "receiver did not start"
            qp.connect(parent.recv())
            parent.send(qp.info())
            bufs = [_payload(i, size) for i, size in enumerate(SIZES)]
            sends = [qp.post_send(ctx.register(b), imm=0x5000 + i) for i, b in enumerate(bufs)]
            for s in sends:
                s.wait(timeout=30)
            for _ in range(50_000):  # keep answering nothing, but stay alive until done
                if parent.poll(0):
                    break
                ctx.progress()
                ctx.transport.wait(0.001)
            assert parent.poll(30), "receiver did not report"
            result = parent.recv()
            sent = qp.transport_qp.stats
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    assert "error" not in result, result
    assert result["digests"] == [hashlib.sha256(b.tobytes()).hexdigest() for b in bufs]
    assert result["imms"] == [0x5000 + i for i in range(len(SIZES))]
    c = result["counters"]
    data_packets = sum(-(-s // ATTR.mtu) for s in SIZES)
    assert c["packets_accepted"] == data_packets
    assert c["bytes_placed"] == sum(SIZES)
    assert c["bad_icrc"] == c["bad_rkey"] == c["late"] == c["out_of_range"] == 0
    assert c["packets_placed"] == sent["wire_packets_sent"]  # nothing lost on loopback
