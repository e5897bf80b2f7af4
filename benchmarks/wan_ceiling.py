"""The WAN emulator's own ceiling: packets/s and Gbit/s it forwards on one core.

iperf3 UDP from namespace A to B through a TUN link with no impairment (a 100 Gbit/s link
with zero delay), at several datagram sizes and offered rates (iperf3 ``-b``; 0 is
unlimited), through the native forwarder, the Python one, or both in the same run. What B
receives is what the forwarder can carry; any result quoted through the emulator must stay
well below it. Needs root and iperf3.

    python benchmarks/wan_ceiling.py [--seconds 3] [--forwarder native,python]
        [--sizes 8972] [--offered 0] [--json out/wan_ceiling.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces, netns_exec


def run(
    size: int, seconds: float, rate: str, rtt: str, offered: str, forwarder: str, mtu: int
) -> dict[str, Any]:
    spec = LinkSpec(rate=rate, rtt=rtt, queue="64MiB")
    with TunLink(spec, mtu=max(mtu, size + 28), forwarder=forwarder) as link:
        server = subprocess.Popen(
            netns_exec(link.ns_b, "iperf3", "-s", "-1", "-J"), stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.5)
        subprocess.run(
            netns_exec(
                link.ns_a,
                "iperf3",
                "-c",
                link.addr_b,
                "-u",
                "-b",
                offered,
                "-l",
                str(size),
                "-t",
                str(seconds),
                "-w",
                "32M",
            ),
            capture_output=True,
            text=True,
            timeout=seconds + 30,
        )
        report = json.loads(server.communicate(timeout=30)[0])
    end = report["end"]["sum"]
    received_pkts = end["packets"] - end["lost_packets"]
    return {
        "forwarder": link.forwarder,
        "datagram": size,
        "offered": offered,
        "received_gbps": received_pkts * size * 8 / end["seconds"] / 1e9,
        "received_kpps": received_pkts / end["seconds"] / 1e3,
        "sender_loss_pct": end["lost_percent"],
        "forwarded": link.summary["forwarded"],
        "report": link.summary.get("report", {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--sizes", default="1400,8900,32000,64000")
    parser.add_argument("--rate", default="100Gbit/s")
    parser.add_argument("--rtt", default="0ms")
    parser.add_argument("--offered", default="1G,2G,0", help="iperf3 -b values (0: unlimited)")
    parser.add_argument(
        "--forwarder", default="native,python", help="native, python or both (comma-separated)"
    )
    parser.add_argument("--mtu", type=int, default=9000, help="TUN MTU (raised to fit --sizes)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if reason := can_use_namespaces():
        sys.exit(f"cannot run: {reason}")
    rows = [
        run(int(s), args.seconds, args.rate, args.rtt, b, f, args.mtu)
        for s in args.sizes.split(",")
        for b in args.offered.split(",")
        for f in args.forwarder.split(",")
    ]
    table = Table(
        title=f"WAN emulator ceiling (one forwarder core, link {args.rate}, RTT {args.rtt})"
    )
    cols = ("forwarder", "datagram B", "offered", "received Gbit/s", "received kpkt/s")
    for col in (*cols, "iperf3 loss %", "late", "max late ms", "vs python"):
        table.add_column(col, justify="right")
    python = {
        (r["datagram"], r["offered"]): r["received_gbps"]
        for r in rows
        if r["forwarder"] == "python"
    }
    for r in rows:
        base = python.get((r["datagram"], r["offered"]))
        r["ratio_to_python"] = r["received_gbps"] / base if base else None
        rep = r["report"].get("a_to_b", {})
        table.add_row(
            r["forwarder"],
            str(r["datagram"]),
            r["offered"] if r["offered"] != "0" else "max",
            f"{r['received_gbps']:.2f}",
            f"{r['received_kpps']:.1f}",
            f"{r['sender_loss_pct']:.1f}",
            str(rep.get("late_packets", "")),
            f"{rep.get('max_lateness_s', 0.0) * 1e3:.2f}",
            f"{r['ratio_to_python']:.2f}x" if r["ratio_to_python"] else "",
        )
    Console().print(table)
    if args.json:
        meta = {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "command": " ".join(["python benchmarks/wan_ceiling.py", *sys.argv[1:]]),
        }
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
