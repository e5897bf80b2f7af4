"""SDR one-shot write goodput over the UDP backend vs iperf3 UDP, loopback, same datagram size.

For each datagram size (4, 8, 32 KiB by default) the same run measures:
  1. iperf3 UDP, unlimited rate (-b 0), 32 MiB socket buffers: the bits/s its receiver got
     (its goodput) and its loss;
  2. SDR one-shot writes (two processes, MTU = the datagram's payload so that one SDR
     packet is one datagram of that size on the wire), paced at fractions of the iperf3
     goodput and unpaced: goodput = message bytes completely received / (first post_send
     to last message complete; one shared monotonic clock), and loss = packets sent minus
     packets placed. ``--total`` messages of 16 MiB go through ``MESSAGES`` receive
     buffers, each posted again as soon as its message arrived.
  3. The unpaced run once per datapath (``--paths``): ``native`` (backends/udp/_datapath.c
     with GSO and GRO, the default), ``native-plain`` (native, one datagram per system
     call), ``python`` (the reference loops; the placement step too).
Sender and receiver are pinned to different cores in both cases (iperf3 -A, sched_setaffinity),
and run at nice -19 when permitted.

    .venv/bin/python benchmarks/udp_datapath.py [--sizes 4096,8192,32768] [--paths ...]
        [--total 64] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

import sdr
from sdr import placement
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.roce import HEADER_SIZE, ICRC_SIZE

MESSAGE = 16 << 20
MESSAGES = 7  # receive buffers; odd: coprime with the receive ids (no straggler warning)
PATHS = {
    "native": ("native", {"gso": True}, {"gro": True}),
    "native-plain": ("native", {"gso": False}, {"gro": False}),
    "python": ("python", {}, {}),
}
"""Datapath name -> (placement.use_datapath, sender transport options, receiver options)."""
CPUS = sorted(os.sched_getaffinity(0))
TX_CPU, RX_CPU = CPUS[0], CPUS[-1]


def iperf3(size: int, seconds: float, port: int = 15201) -> dict[str, float]:
    """iperf3 UDP at unlimited rate with ``size``-byte datagrams; receiver's view."""
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port), "-A", str(RX_CPU)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        out = subprocess.run(
            ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-l", str(size)]
            + ["-w", "32M", "-t", str(seconds), "-A", str(TX_CPU), "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        server.wait(timeout=10)
    end = json.loads(out)["end"]
    received, sent, cpu = end["sum_received"], end["sum_sent"], end["cpu_utilization_percent"]
    got = max(1, received["packets"] - received["lost_packets"])
    return {
        "goodput": received["bits_per_second"],
        "sent_rate": sent["bits_per_second"],
        "loss": received["lost_percent"] / 100,
        # CPU time per packet of each side (iperf3 reports each process's utilisation)
        "tx_cpu_us_per_packet": cpu["host_total"] / 100 * sent["seconds"] / sent["packets"] * 1e6,
        "rx_cpu_us_per_packet": cpu["remote_total"] / 100 * received["seconds"] / got * 1e6,
    }


def _receiver(conn: Connection, attr: sdr.QPAttr, verify: bool, path: str, total: int) -> None:
    os.sched_setaffinity(0, {RX_CPU})
    datapath, _, options = PATHS[path]
    placement.use_datapath(datapath)
    with sdr.Context(backend=UdpTransport(port=0, verify_icrc=verify, **options)) as ctx:
        qp = ctx.create_qp(attr)
        conn.send(qp.info())
        qp.connect(conn.recv())
        regions = [ctx.register(np.zeros(MESSAGE, dtype=np.uint8)) for _ in range(MESSAGES)]
        handles = [qp.post_recv(r) for r in regions]
        conn.send("ready")
        cpu = 0.0  # CPU time of the polls that found work (the receiver busy-polls)
        idle_since = None
        done = complete = 0
        while done < total:
            cpu0 = time.process_time()
            work = ctx.progress()
            # a message is over when it arrived, or a later one did (loopback keeps order:
            # the rest of it was lost), or nothing came for 50 ms (all in flight lost
            # packets); release it, its buffer takes the next message
            stalled = idle_since is not None and time.monotonic() - idle_since > 0.05
            while done < total and (
                handles[done].record.arrived
                or any(h.record.arrived for h in handles[done + 1 :])
                or (stalled and done < len(handles) - 1)
            ):
                if stalled:  # after a quiet 50 ms: give up the oldest only
                    stalled, idle_since = False, time.monotonic()
                complete += handles[done].record.arrived
                if len(handles) < total:
                    handles[done].complete()
                    handles.append(qp.post_recv(regions[done % MESSAGES]))
                done += 1
            if work:
                cpu += time.process_time() - cpu0
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 1.0:
                break  # the rest was lost
        end = time.monotonic()
        conn.send({"end": end, "complete": complete, "counters": qp.transport_qp.stats, "cpu": cpu})


def sdr_oneshot(
    size: int, rate: float | None, verify: bool = True, path: str = "native", total: int = 64
) -> dict[str, Any]:
    """Goodput and loss of ``total`` one-shot writes of MESSAGE bytes at ``rate`` bits/s.

    verify: whether the receiver checks each packet's ICRC (the default of the backend);
    path: a key of PATHS."""
    mtu = size - HEADER_SIZE - ICRC_SIZE  # one SDR packet = one UDP datagram of ``size``
    mtu -= mtu % 4
    attr = sdr.QPAttr(
        mtu=mtu,
        chunk_size=mtu * 16,
        max_message_size=MESSAGE,
        max_messages=MESSAGES,
        rate_limit=rate,
    )
    datapath, options, _ = PATHS[path]
    here, there = mp.get_context("fork").Pipe()
    proc = mp.get_context("fork").Process(
        target=_receiver, args=(there, attr, verify, path, total), daemon=True
    )
    proc.start()
    previous = placement.use_datapath(datapath)
    try:
        os.sched_setaffinity(0, {TX_CPU})
        with sdr.Context(backend=UdpTransport(port=0, **options)) as ctx:
            qp = ctx.create_qp(attr)
            qp.connect(here.recv())
            here.send(qp.info())
            src = np.random.default_rng(1).integers(0, 256, MESSAGE, dtype=np.uint8)
            region = ctx.register(src)
            assert here.recv() == "ready"
            start, cpu0 = time.monotonic(), time.process_time()
            sends: list[Any] = []
            for done in range(total):  # at most MESSAGES in flight: one per receive buffer
                while len(sends) < total and len(sends) - done < MESSAGES:
                    sends.append(qp.post_send(region))
                sends[done].wait(timeout=60)
            tx_cpu = time.process_time() - cpu0
            result = here.recv()
            sent = qp.transport_qp.stats["wire_packets_sent"]
    finally:
        placement.use_datapath(previous)
        os.sched_setaffinity(0, set(CPUS))
        proc.join(timeout=10)
    placed = result["counters"]["packets_placed"]
    seconds = result["end"] - start
    return {
        "path": path,
        "rate_limit": rate,
        "verify_icrc": verify,
        "goodput": result["complete"] * MESSAGE * 8 / seconds,
        "complete": result["complete"],
        "messages": total,
        "seconds": seconds,
        "packets_sent": sent,
        "packets_lost": sent - placed,
        "loss": (sent - placed) / sent,
        "tx_cpu_us_per_packet": tx_cpu / sent * 1e6,
        "rx_cpu_us_per_packet": result["cpu"] / max(placed, 1) * 1e6,
    }


def _goodput(result: dict[str, Any]) -> float:
    return float(result["goodput"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="4096,8192,32768", help="datagram sizes, bytes")
    parser.add_argument("--fractions", default="0.8,0.9,1.0", help="SDR rates / iperf3 goodput")
    parser.add_argument("--seconds", type=float, default=3.0, help="iperf3 duration")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs, each side")
    parser.add_argument("--json", default=None, help="write results here")
    parser.add_argument(
        "--paths", default=",".join(PATHS), help=f"unpaced runs, each of: {', '.join(PATHS)}"
    )
    parser.add_argument("--total", type=int, default=64, help="16 MiB messages per SDR run")
    args = parser.parse_args()
    if shutil.which("iperf3") is None:
        sys.exit("iperf3 is not installed (make system installs it)")
    try:  # both peers inherit it: a busy shared machine disturbs them less
        os.nice(-19)
    except OSError:
        print("note: not permitted to raise priority (nice -19); numbers may be noisier")
    rows = []
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("iperf3 CPU us/packet (tx, rx) is printed per size; SDR's per run")
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        sys.exit(f"--paths: unknown {', '.join(unknown)} (choose from {', '.join(PATHS)})")
    print(f"{'size':>6} {'iperf3 Gbit/s':>13} {'loss':>6} | {'path':>12} {'SDR rate':>9} "
          f"{'ICRC':>5} {'Gbit/s':>7} {'loss':>8} {'ratio':>6} {'tx us/pkt':>9} {'rx us/pkt':>9} "
          f"{'cpu ratio':>9}")  # fmt: skip
    for size in (int(s) for s in args.sizes.split(",")):
        ref = max((iperf3(size, args.seconds) for _ in range(args.repeat)), key=_goodput)
        print(
            f"iperf3 {size} B: tx {ref['tx_cpu_us_per_packet']:.1f} us/pkt, "
            f"rx {ref['rx_cpu_us_per_packet']:.1f} us/pkt"
        )
        fractions = [float(f) for f in args.fractions.split(",")]
        runs = [(ref["goodput"] * f, v, "native") for f in fractions for v in (True, False)]
        for rate, verify, path in [*runs, *((None, True, p) for p in paths)]:
            res = max(
                (sdr_oneshot(size, rate, verify, path, args.total) for _ in range(args.repeat)),
                key=_goodput,
            )
            res["ratio"] = res["goodput"] / ref["goodput"]
            # load-robust estimate: ratio of the busier side's CPU time per packet
            res["cpu_ratio"] = max(ref["tx_cpu_us_per_packet"], ref["rx_cpu_us_per_packet"]) / max(
                res["tx_cpu_us_per_packet"], res["rx_cpu_us_per_packet"]
            )
            rows.append({"size": size, "iperf3": ref, "sdr": res})
            label = "unpaced" if rate is None else f"{rate / 1e9:.2f}G"
            print(
                f"{size:>6} {ref['goodput'] / 1e9:>13.2f} {ref['loss']:>6.1%} | {path:>12} "
                f"{label:>9} {'on' if verify else 'off':>5} {res['goodput'] / 1e9:>7.2f} "
                f"{res['loss']:>8.2%} "
                f"{res['ratio']:>6.2f} {res['tx_cpu_us_per_packet']:>9.1f} "
                f"{res['rx_cpu_us_per_packet']:>9.1f} {res['cpu_ratio']:>9.2f}",
                flush=True,
            )
    report = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": os.getloadavg(),
        },
        "iperf3": subprocess.run(["iperf3", "--version"], capture_output=True, text=True)
        .stdout.split("\n")[0]
        .strip(),
        "parameters": {
            "message": MESSAGE,
            "receive_buffers": MESSAGES,
            "messages_per_run": args.total,
            "tx_cpu": TX_CPU,
            "rx_cpu": RX_CPU,
        },
        "results": rows,
    }
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
