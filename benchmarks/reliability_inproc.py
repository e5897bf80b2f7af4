"""Reliability schemes side by side over the in-process wire with a simulated clock.

Each scheme writes the same messages over the same seeded lossy link (rate-limited, fixed
RTT); the clock is simulated, so the times are those of the modelled link, not of this
machine. Reported per scheme and packet drop rate: mean write completion time over the
ideal (M * T_INJ + RTT, the paper's normalization), chunks retransmitted and control
messages per message, parity overhead.

    python benchmarks/reliability_inproc.py [--size 8MiB] [--messages 5] [--out out/x.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import sdr
from sdr.backends.inproc import InprocNetwork, InprocTransport, ManualClock
from sdr.runtime import ReliableQP, drive, wait_all
from sdr.units import parse_rate, parse_size, parse_time

SCHEMES = ["sr-rto", "sr-nack", "ec-mds", "ec-xor"]
DROPS = [0.0, 1e-4, 1e-3, 1e-2]


def run(scheme: str, drop: float, size: int, messages: int, rate: float, rtt: float) -> dict:
    clock = ManualClock()
    net = InprocNetwork(seed=42, clock=clock, delay=rtt / 2, drop=drop, control_drop=drop)
    attr = sdr.QPAttr(
        mtu=4096, chunk_size="64KiB", max_message_size=size, max_messages=16, rate_limit=rate
    )
    a, b = sdr.Context(InprocTransport(net)), sdr.Context(InprocTransport(net))
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    cfg = {"rtt": rtt, "k": 32, "m": 8, "max_in_flight": 1}
    s, r = ReliableQP(qa, scheme, **cfg), ReliableQP(qb, scheme, **cfg)
    src = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
    dst = np.zeros(size, dtype=np.uint8)
    smr, rmr = a.register(src), b.register(dst)
    times, retx, control = [], 0, 0
    for _ in range(messages):
        rh = r.post_recv(rmr)
        start = clock.t + rtt  # the receive is posted ahead: its CTS is at the sender
        drive([s, r], lambda start=start: clock.t >= start, what="CTS")
        sent_before = sum(v for k, v in s.counters.items() if k.startswith("sent_"))
        wh = s.write(smr)
        wait_all([wh, rh], timeout=1000)
        assert (src == dst).all()
        times.append(clock.t - start)
        retx += wh.retransmissions
        control += sum(v for k, v in s.counters.items() if k.startswith("sent_")) - sent_before
        control += sum(v for k, v in rh.stats.items() if k.startswith("sent_"))
    ideal = size * 8 / rate + rtt
    chunks = -(-size // attr.chunk_size)
    parity = wh.stats.get("chunks_sent_lane1", 0)
    return {
        "scheme": scheme,
        "drop": drop,
        "mean_s": float(np.mean(times)),
        "max_s": float(np.max(times)),
        "ideal_s": ideal,
        "mean_over_ideal": float(np.mean(times)) / ideal,
        "retransmitted_chunks_per_message": retx / messages,
        "control_messages_per_message": control / messages,
        "parity_overhead": parity / chunks,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="8MiB")
    p.add_argument("--messages", type=int, default=5)
    p.add_argument("--rate", default="10Gbit/s")
    p.add_argument("--rtt", default="25ms")
    p.add_argument("--out", default="out/reliability_inproc.json")
    args = p.parse_args(argv)
    size, rate, rtt = parse_size(args.size), parse_rate(args.rate), parse_time(args.rtt)
    results = [
        run(scheme, drop, size, args.messages, rate, rtt) for drop in DROPS for scheme in SCHEMES
    ]
    table = Table(
        title=f"{args.size} writes, {args.rate}, RTT {args.rtt}, 64 KiB chunks, (32,8), "
        f"{args.messages} messages, simulated clock"
    )
    for col in ("drop/pkt", "scheme", "mean/ideal", "max s", "retx/msg", "ctrl/msg", "parity"):
        table.add_column(col, justify="right")
    for row in results:
        table.add_row(
            f"{row['drop']:g}",
            row["scheme"],
            f"{row['mean_over_ideal']:.2f}",
            f"{row['max_s']:.4f}",
            f"{row['retransmitted_chunks_per_message']:.1f}",
            f"{row['control_messages_per_message']:.1f}",
            f"{row['parity_overhead']:.2f}",
        )
    Console().print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "python": sys.version.split()[0],
                "numpy": np.__version__,
                "command": " ".join(["python", *sys.argv]),
                "parameters": vars(args),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
