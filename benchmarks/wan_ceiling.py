"""The WAN emulator's own ceiling: packets/s and Gbit/s it forwards on one core.

iperf3 UDP (or TCP) from namespace A to B through a TUN link with no impairment (a
100 Gbit/s link with zero delay), at several datagram sizes and offered rates (iperf3
``-b``; 0 is unlimited), through the native forwarder, the Python one, or both in the same
run, with TUN offloads (``--offload auto``: where the kernel takes them, native only) and
without (``off``). What B receives is what the forwarder can carry; any result quoted
through the emulator must stay well below it. Needs root and iperf3.

    python benchmarks/wan_ceiling.py [--seconds 3] [--forwarder native,python]
        [--sizes 8972] [--offered 0] [--proto udp,tcp] [--offload auto,off]
        [--json out/wan_ceiling.json]

For TCP the size is iperf3's write size (``-l``) and the packets are the kernel's (MSS
from the MTU); kpkt/s is then the link's delivered packets. ``udp-gso`` is UDP sent as
SDR's UDP backend sends it, with GSO (``UDP_SEGMENT``: datagrams of the size, as many as
fit 64 KiB per send, unpaced) and received with GRO (``UDP_GRO``), by a small Python
pair instead of iperf3; the offered rate does not apply to it.
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

_GSO_SENDER = """
import socket, sys, time
size, seconds = int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 << 20)
s.setsockopt(socket.SOL_UDP, 103, size)  # UDP_SEGMENT
buf = bytes(size * (65000 // size))
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        s.sendto(buf, (sys.argv[1], 9995))
    except OSError:
        pass  # ENOBUFS: the device queue is full; the link drops, as on a wire
"""
_GRO_RECEIVER = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
s.setsockopt(socket.SOL_UDP, 104, 1)  # UDP_GRO
s.bind((sys.argv[1], 9995))
s.settimeout(5.0)
buf, size = bytearray(1 << 16), int(sys.argv[2])
first = last = None
got = datagrams = 0
try:
    while True:
        n = s.recv_into(buf)
        last = time.monotonic()
        first = first or last
        got += n
        datagrams += -(-n // size)
        s.settimeout(1.0)
except TimeoutError:
    pass
print(json.dumps({"bytes": got, "datagrams": datagrams, "seconds": (last or 0) - (first or 0)}))
"""


def run_gso(
    size: int, seconds: float, rate: str, rtt: str, forwarder: str, mtu: int, offload: str
) -> dict[str, Any]:
    """UDP with GSO out of A and GRO into B (as SDR's UDP backend) through a TUN link."""
    spec = LinkSpec(rate=rate, rtt=rtt, queue="64MiB")
    link = TunLink(
        spec,
        mtu=max(mtu, size + 28),
        forwarder=forwarder,
        offload="off" if forwarder == "python" else offload,
    )
    py = sys.executable
    with link:
        receiver = subprocess.Popen(
            netns_exec(link.ns_b, py, "-c", _GRO_RECEIVER, link.addr_b, str(size)),
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        t0 = time.monotonic()
        subprocess.run(
            netns_exec(link.ns_a, py, "-c", _GSO_SENDER, link.addr_b, str(size), str(seconds)),
            timeout=seconds + 30,
        )
        got = json.loads(receiver.communicate(timeout=30)[0])
        wall = time.monotonic() - t0
    span = max(got["seconds"], seconds)  # over the sending time at least (as iperf3)
    return _row(link, "udp-gso", size, "max", got["bytes"] * 8 / span / 1e9,
                got["datagrams"] / span, None, span, wall, None, None)  # fmt: skip


def _row(
    link: TunLink,
    proto: str,
    size: int,
    offered: str,
    gbps: float,
    pps: float,
    loss: float | None,
    measured_s: float,
    wall: float,
    client_pct: float | None,
    server_pct: float | None,
) -> dict[str, Any]:
    cpu = link.summary.get("cpu_s", {})
    fwd_cpu = cpu.get("user", 0.0) + cpu.get("system", 0.0)
    received_gb = gbps * measured_s / 8
    return {
        "forwarder": link.forwarder,
        "proto": proto,
        "offload": f"{link.offload:#x}" if link.offload else "off",
        "datagram": size,
        "offered": offered,
        "received_gbps": gbps,
        "received_kpps": pps / 1e3,
        "sender_loss_pct": loss,
        "forwarded": link.summary["forwarded"],
        "report": link.summary.get("report", {}),
        "native": link.summary.get("native", {}),
        # CPU: the forwarder's over the link's lifetime (set-up and tear-down included),
        # iperf3's own shares of a core (client, server) while it ran
        "forwarder_cpu_s": fwd_cpu,
        "forwarder_core": fwd_cpu / wall if wall > 0 else 0.0,
        "forwarder_cpu_s_per_gb": fwd_cpu / received_gb if received_gb else None,
        "client_cpu_pct": client_pct,
        "server_cpu_pct": server_pct,
    }


def run(
    size: int,
    seconds: float,
    rate: str,
    rtt: str,
    offered: str,
    forwarder: str,
    mtu: int,
    proto: str = "udp",
    offload: str = "auto",
) -> dict[str, Any]:
    if proto == "udp-gso":
        return run_gso(size, seconds, rate, rtt, forwarder, mtu, offload)
    spec = LinkSpec(rate=rate, rtt=rtt, queue="64MiB")
    udp = proto == "udp"
    link = TunLink(
        spec,
        mtu=max(mtu, size + 28) if udp else mtu,
        forwarder=forwarder,
        offload="off" if forwarder == "python" else offload,
    )
    with link:
        server = subprocess.Popen(
            netns_exec(link.ns_b, "iperf3", "-s", "-1", "-J"), stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.5)
        t0 = time.monotonic()
        client = subprocess.run(
            netns_exec(
                link.ns_a,
                "iperf3",
                "-J",
                "-c",
                link.addr_b,
                *(["-u"] if udp else []),
                "-w",
                "32M",
                "-b",
                offered,
                "-l",
                str(size),
                "-t",
                str(seconds),
            ),
            capture_output=True,
            text=True,
            timeout=seconds + 30,
        )
        report = json.loads(server.communicate(timeout=30)[0])
        wall = time.monotonic() - t0
    delivered = link.summary.get("report", {}).get("a_to_b", {}).get("delivered", 0)
    if udp:
        end = report["end"]["sum"]
        received_pkts = end["packets"] - end["lost_packets"]
        gbps, loss = received_pkts * size * 8 / end["seconds"] / 1e9, end["lost_percent"]
    else:
        end = report["end"]["sum_received"]
        received_pkts, gbps, loss = delivered, end["bits_per_second"] / 1e9, 0.0
    sent = json.loads(client.stdout or "{}").get("end", {})
    client_pct = sent.get("cpu_utilization_percent", {}).get("host_total")
    server_pct = report["end"].get("cpu_utilization_percent", {}).get("host_total")
    return _row(link, proto, size, offered, gbps, received_pkts / end["seconds"], loss,
                end["seconds"], wall, client_pct, server_pct)  # fmt: skip


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
    parser.add_argument("--proto", default="udp", help="udp, tcp, udp-gso (comma-separated)")
    parser.add_argument(
        "--offload", default="auto", help="TUN offloads: auto, off or both (comma-separated)"
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    if reason := can_use_namespaces():
        sys.exit(f"cannot run: {reason}")
    rows = [
        run(int(s), args.seconds, args.rate, args.rtt, b, f, args.mtu, p, o)
        for p in args.proto.split(",")
        for s in args.sizes.split(",")
        for b in args.offered.split(",")
        for f in args.forwarder.split(",")
        for o in (args.offload.split(",") if f == "native" else ["off"])
    ]
    table = Table(
        title=f"WAN emulator ceiling (one forwarder core, link {args.rate}, RTT {args.rtt})"
    )
    cols = ("proto", "forwarder", "offload", "size B", "offered", "received Gbit/s")
    more = ("kpkt/s", "iperf3 loss %", "late", "max late ms", "fwd core", "fwd s/GB")
    for col in (*cols, *more, "vs python", "vs off"):
        table.add_column(col, justify="right")
    python = {
        (r["proto"], r["datagram"], r["offered"]): r["received_gbps"]
        for r in rows
        if r["forwarder"] == "python"
    }
    plain = {
        (r["proto"], r["datagram"], r["offered"]): r["received_gbps"]
        for r in rows
        if r["forwarder"] == "native" and r["offload"] == "off"
    }
    for r in rows:
        key = (r["proto"], r["datagram"], r["offered"])
        base, off = python.get(key), plain.get(key)
        r["ratio_to_python"] = r["received_gbps"] / base if base else None
        on = r["forwarder"] == "native" and r["offload"] != "off"
        r["ratio_to_off"] = r["received_gbps"] / off if off and on else None
        rep = r["report"].get("a_to_b", {})
        table.add_row(
            r["proto"],
            r["forwarder"],
            r["offload"],
            str(r["datagram"]),
            r["offered"] if r["offered"] != "0" else "max",
            f"{r['received_gbps']:.2f}",
            f"{r['received_kpps']:.1f}",
            "" if r["sender_loss_pct"] is None else f"{r['sender_loss_pct']:.1f}",
            str(rep.get("late_packets", "")),
            f"{rep.get('max_lateness_s', 0.0) * 1e3:.2f}",
            f"{r['forwarder_core']:.2f}",
            f"{r['forwarder_cpu_s_per_gb']:.3f}" if r["forwarder_cpu_s_per_gb"] else "",
            f"{r['ratio_to_python']:.2f}x" if r["ratio_to_python"] else "",
            f"{r['ratio_to_off']:.2f}x" if r["ratio_to_off"] else "",
        )
    Console().print(table)
    if args.json:
        meta = {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "load": os.getloadavg(),
            "command": " ".join(["python benchmarks/wan_ceiling.py", *sys.argv[1:]]),
        }
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
