"""CPU cost of the UDP receive path per batch: fixed cost per recvmmsg batch vs per packet.

    python benchmarks/udp_receive_batch.py [--mtu 4096] [--batches 1,4,16,64] [--json out.json]

Loads ``batch`` valid RoCEv2 datagrams from a connected peer into the receiver's staging
ring (as ``recvmmsg`` would) and times ``Receiver._process`` on them, in one process
with no socket: header checks, ICRC, key-table placement and the copy into the
registered buffer, nothing of the kernel. Fitting ``time = fixed + per_packet * batch``
tells how much of a paced receiver's cost (small batches) is per call. Process CPU
time, median of ``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdr  # noqa: E402
from backends.udp import UdpTransport  # noqa: E402
from backends.udp.roce import encode_packet  # noqa: E402

PEER = ("127.0.0.1", 45000)


def _rig(mtu: int):  # noqa: ANN202
    """A UDP transport whose QP is connected to PEER, one 16 MiB receive bound."""
    attr = sdr.QPAttr(mtu=mtu, chunk_size=mtu * 16, max_message_size=16 << 20, max_messages=4)
    transport = UdpTransport(port=0, prefault=False, seed=7)
    qp = transport.create_qp(attr)
    qp.connect(
        {"host": PEER[0], "port": PEER[1], "control_port": 1, "control_id": 1,
         "qpns": [[q + 1 for q in gen] for gen in qp.qpns], "rkeys": [1] * attr.generations}
    )  # fmt: skip
    region = transport.register(bytearray(16 << 20))
    qp.bind(0, 0, region, 0, 16 << 20, 0)
    return transport, qp


def _load(ring, i: int, packet: bytes) -> None:  # noqa: ANN001
    """Datagram ``i`` of the staging ring, from PEER, as recvmmsg leaves it."""
    ring.slots[i, : len(packet)] = np.frombuffer(packet, dtype=np.uint8)
    ring.msgs[i, 6] = 0
    ring.msgs[i, 7] = len(packet)
    name = ring.names[i]
    name[:] = 0
    name[0:2] = (socket.AF_INET, 0)
    name[2:4] = np.frombuffer(struct.pack("!H", PEER[1]), dtype=np.uint8)
    name[4:8] = np.frombuffer(socket.inet_aton(PEER[0]), dtype=np.uint8)


def measure(mtu: int, batches: list[int], calls: int, repeat: int) -> list[dict]:
    """Median CPU microseconds per call and per packet for each batch size."""
    transport, qp = _rig(mtu)
    receiver = transport._receiver
    local = (transport.host, transport.port)
    layout = qp.attr.layout
    for i in range(max(batches)):
        imm = layout.encode(0, i, 0)  # message id 0 (the binding's), packet i
        packet = encode_packet(PEER, local, qp.qpns[0][0], i, i * mtu, qp.rkeys[0], imm, bytes(mtu))
        _load(receiver.ring, i, packet)
    rows = []
    for n in batches:
        samples = []
        for _ in range(repeat + 1):  # the first round warms up
            start = time.process_time()
            for _ in range(calls):
                receiver._process(n)
                qp.completions.clear()
                qp.pending = 0
            samples.append((time.process_time() - start) / calls * 1e6)
        placed = qp.stats["packets_placed"]
        assert placed == (repeat + 1) * calls * n, (placed, qp.discards)  # every one placed
        qp.stats["packets_placed"] = 0
        us = statistics.median(samples[1:])
        rows.append({"batch": n, "us_per_call": us, "us_per_packet": us / n})
    transport.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtu", type=int, default=4096)
    ap.add_argument("--batches", default="1,4,16,64")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    rows = measure(args.mtu, batches, args.calls, args.repeat)
    per_packet, fixed = np.polyfit([r["batch"] for r in rows], [r["us_per_call"] for r in rows], 1)
    print(f"| batch | us per call | us per packet |  (MTU {args.mtu})\n|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['us_per_call']:.1f} | {r['us_per_packet']:.2f} |")
    print(f"fit: {fixed:.1f} us per call + {per_packet:.2f} us per packet")
    if args.json:
        doc = {
            "command": " ".join(["python", *sys.argv]),
            "machine": {"cpus": len(__import__("os").sched_getaffinity(0)),
                        "platform": platform.platform(), "python": platform.python_version()},
            "parameters": vars(args),
            "results": rows,
            "fit": {"us_per_call": fixed, "us_per_packet": per_packet},
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
