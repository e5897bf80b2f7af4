"""CPU cost of the UDP receive path per batch: fixed cost per recvmmsg batch vs per packet.

    python benchmarks/udp_receive_batch.py [--mtu 4096] [--batches 1,4,16,64]
        [--datapaths native,python] [--json out.json]

Sends valid RoCEv2 datagrams from a connected peer over loopback, lets ``recvmmsg``
stage them once, then times the receive pass on the first ``batch`` of them again and
again (``Receiver.process_native`` for ``native``, the reference ``Receiver._process``
for ``python``; the placement step follows the same switch): header checks, ICRC,
key-table placement and the copy into the registered buffer, nothing of the kernel.
After each call the packets are accepted once more (``KeyTable.reopen``), so every call
places them all. Fitting ``time = fixed + per_packet * batch``
tells how much of a paced receiver's cost (small batches) is per call. Process CPU
time, median of ``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdr  # noqa: E402
from sdr import placement  # noqa: E402
from sdr.backends.udp import UdpTransport  # noqa: E402
from sdr.backends.udp.roce import encode_packet  # noqa: E402
from sdr.transport import Bind  # noqa: E402


def _rig(mtu: int, peer: tuple[str, int]):  # noqa: ANN202
    """A UDP transport whose QP is connected to ``peer``, one 16 MiB receive bound."""
    attr = sdr.QPAttr(mtu=mtu, chunk_size=mtu * 16, max_message_size=16 << 20, max_messages=4)
    transport = UdpTransport(port=0, prefault=False, seed=7)
    qp = transport.create_qp(attr)
    qp.connect(
        {"host": peer[0], "port": peer[1], "control_port": 1, "control_id": 1,
         "qpns": [[q + 1 for q in gen] for gen in qp.qpns], "rkeys": [1] * attr.generations}
    )  # fmt: skip
    region = transport.register(bytearray(16 << 20))
    qp.bind(Bind(generation=0, slot=0, region=region, offset=0, length=16 << 20, msg_id=0))
    return transport, qp


def _stage(transport, qp, sender: socket.socket, count: int) -> None:  # noqa: ANN001
    """Send ``count`` valid datagrams from ``sender`` and let recvmmsg stage them."""
    local = (transport.host, transport.port)
    peer = sender.getsockname()
    mtu, layout = qp.attr.mtu, qp.attr.layout
    for i in range(count):
        imm = layout.encode(0, i, 0)  # message id 0 (the binding's), packet i
        packet = encode_packet(peer, local, qp.qpns[0][0], i, i * mtu, qp.rkeys[0], imm, bytes(mtu))
        sender.sendto(packet, local)
    ring, staged = transport._receiver.ring, 0
    deadline = time.monotonic() + 5.0
    while staged < count and time.monotonic() < deadline:  # loopback: all arrive at once
        staged = ring.receive(transport.data_socket, count)
    if staged != count:
        raise RuntimeError(f"staged {staged} of {count} datagrams")


def measure(mtu: int, batches: list[int], calls: int, repeat: int, datapath: str) -> list[dict]:
    """Median CPU microseconds per call and per packet for each batch size."""
    previous = placement.use_datapath(datapath)
    try:
        return _measure(mtu, batches, calls, repeat, datapath)
    finally:
        placement.use_datapath(previous)


def _measure(mtu: int, batches: list[int], calls: int, repeat: int, datapath: str) -> list[dict]:
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    transport, qp = _rig(mtu, sender.getsockname())
    receiver = transport._receiver
    _stage(transport, qp, sender, max(batches))
    sender.close()
    process = receiver.process_native if datapath == "native" else receiver._process
    rows = []
    for n in batches:
        samples = []
        for _ in range(repeat + 1):  # the first round warms up
            start = time.process_time()
            for _ in range(calls):
                process(n)
                qp.keys.reopen(0, 0, 0, n)  # the same packets are new again next call
                qp.completions.clear()
                qp.pending = 0
            samples.append((time.process_time() - start) / calls * 1e6)
        placed = qp.stats["packets_placed"]
        assert placed == (repeat + 1) * calls * n, (placed, qp.discards)  # every one placed
        qp.stats["packets_placed"] = 0
        us = statistics.median(samples[1:])
        rows.append({"datapath": datapath, "batch": n, "us_per_call": us, "us_per_packet": us / n})
    transport.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtu", type=int, default=4096)
    ap.add_argument("--batches", default="1,4,16,64")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--datapaths", default="native,python")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    rows, fits = [], {}
    print(f"| datapath | batch | us per call | us per packet |  (MTU {args.mtu})")
    print("|---|---:|---:|---:|")
    for datapath in args.datapaths.split(","):
        mine = measure(args.mtu, batches, args.calls, args.repeat, datapath)
        for r in mine:
            print(
                f"| {datapath} | {r['batch']} | {r['us_per_call']:.1f} | {r['us_per_packet']:.2f} |"
            )
        slope, fixed = np.polyfit([r["batch"] for r in mine], [r["us_per_call"] for r in mine], 1)
        fits[datapath] = {"us_per_call": fixed, "us_per_packet": slope}
        rows += mine
    for datapath, fit in fits.items():
        print(f"fit {datapath}: {fit['us_per_call']:.1f} us per call + "
              f"{fit['us_per_packet']:.2f} us per packet")  # fmt: skip
    if args.json:
        doc = {
            "command": " ".join(["python", *sys.argv]),
            "machine": {"cpus": len(__import__("os").sched_getaffinity(0)),
                        "platform": platform.platform(), "python": platform.python_version()},
            "parameters": vars(args),
            "results": rows,
            "fit": fits,
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
