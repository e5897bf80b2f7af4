"""How fast the discrete-event simulation runs the real protocol (benchmark, not a test).

For each case it simulates ``--writes`` writes (real SDR core and reliability schemes on
simulated time) and reports simpy events per wall second, wall time per simulated write,
simulated packets per wall second, and how many times slower than real time the
simulation is. Peer in the same run: the vectorized Monte Carlo of the same case (samples
per second). Agreement of the same writes with the model: the plain mean against Monte
Carlo (20,000 samples), and the residual after pairing each write with the model's time
for its own losses (see docs/simulator.md).

    .venv/bin/python benchmarks/des_speed.py --writes 100 --json out/des_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import simpy
from rich.console import Console
from rich.table import Table

from sdr.simulator.des import DesOptions, packet_loss, simulate_writes
from sdr.simulator.des_paired import expected_protocol_difference, paired_model_time
from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec

MIB = 1 << 20
RTT = 0.025
# (scheme, size, line rate bit/s, per-chunk drop, copy payload)
CASES = [
    ("sr-rto", 4 * MIB, 1e9, 1e-2, False),
    ("sr-nack", 4 * MIB, 10e9, 1e-2, False),
    ("ec-mds", 4 * MIB, 10e9, 3e-2, False),
    ("ec-mds", 4 * MIB, 10e9, 3e-2, True),
    ("sr-rto", 16 * MIB, 10e9, 1e-3, False),
    ("ec-mds", 16 * MIB, 10e9, 1e-2, False),
]


def run_case(scheme: str, size: int, rate: float, drop: float, copy: bool, writes: int) -> dict:
    """Simulate one case and compare it with Monte Carlo; returns a result row."""
    link, spec = Link(rate, RTT), SchemeSpec(scheme)
    run = simulate_writes(
        link,
        size,
        spec,
        packet_loss(link, drop),
        samples=writes,
        seed=11,
        options=DesOptions(copy_payload=copy),
    )
    start = time.perf_counter()
    mc = evaluate(link, size, drop, spec, method="montecarlo", samples=20_000, seed=3)
    mc_wall = time.perf_counter() - start
    protocol = np.array(
        [paired_model_time(link, size, spec, z, zp, protocol=True) for z, zp in run.chunk_losses]
    )
    known = expected_protocol_difference(link, size, spec, drop, samples=2000)
    residual = float(np.nanmean(run.times_s - protocol))
    packets = run.link["a->b"]["packets"] + run.link["b->a"]["packets"]
    control = run.link["a->b"]["control_packets"] + run.link["b->a"]["control_packets"]
    des_mean = float(run.times_s.mean())
    return {
        "scheme": scheme,
        "size_bytes": size,
        "rate": rate,
        "drop_per_chunk": drop,
        "copy_payload": copy,
        "writes": writes,
        "failed": run.failed,
        "correct": run.correct,
        "events": run.events,
        "wall_s": run.wall_s,
        "events_per_s": run.events_per_s,
        "wall_per_write_s": run.wall_per_write_s,
        "cpu_s": run.cpu_s,
        "cpu_per_write_s": run.cpu_s / writes,
        "events_per_cpu_s": run.events / run.cpu_s,
        "data_packets": packets,
        "control_packets": control,
        "packets_per_wall_s": (packets + control) / run.wall_s,
        "sim_s": run.sim_s,
        "slower_than_real_time": run.wall_s / run.sim_s,
        "mc_samples_per_s": 20_000 / mc_wall,
        "des_mean_s": des_mean,
        "des_mean_sem_s": float(run.times_s.std(ddof=1) / np.sqrt(writes)),
        "mc_mean_s": mc.mean_s,
        "analytic_mean_s": mc.analytic_mean_s,
        "des_over_mc": des_mean / mc.mean_s - 1,
        "known_differences_s": known,
        "paired_residual_s": residual,
        "control_variate_over_mc": (mc.mean_s + known + residual) / mc.mean_s - 1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100, help="simulated writes per case")
    parser.add_argument("--json", default="out/des_speed.json", help="result file")
    args = parser.parse_args(argv)

    rows = [run_case(*case, args.writes) for case in CASES]
    table = Table(title=f"Discrete-event simulation, {args.writes} writes per case, RTT 25 ms")
    cols = ("case", "events/s", "events/CPU s", "wall/write", "CPU/write", "pkts/s", "x real time")
    for col in (*cols, "MC samples/s"):
        table.add_column(col, justify="right")
    for col in ("DES mean", "MC mean", "DES/MC-1", "+-sem", "known", "paired", "CV/MC-1"):
        table.add_column(col, justify="right")
    for r in rows:
        name = (
            f"{r['scheme']} {r['size_bytes'] >> 20}MiB {r['rate'] / 1e9:g}G "
            f"p={r['drop_per_chunk']:g}" + (" copy" if r["copy_payload"] else "")
        )
        table.add_row(
            name,
            f"{r['events_per_s']:.0f}",
            f"{r['events_per_cpu_s']:.0f}",
            f"{r['wall_per_write_s'] * 1e3:.0f} ms",
            f"{r['cpu_per_write_s'] * 1e3:.0f} ms",
            f"{r['packets_per_wall_s']:.0f}",
            f"{r['slower_than_real_time']:.1f}",
            f"{r['mc_samples_per_s']:.0f}",
            f"{r['des_mean_s'] * 1e3:.2f} ms",
            f"{r['mc_mean_s'] * 1e3:.2f} ms",
            f"{r['des_over_mc'] * 100:+.2f}%",
            f"{r['des_mean_sem_s'] / r['mc_mean_s'] * 100:.2f}%",
            f"{r['known_differences_s'] / r['mc_mean_s'] * 100:+.2f}%",
            f"{r['paired_residual_s'] / r['mc_mean_s'] * 100:+.2f}%",
            f"{r['control_variate_over_mc'] * 100:+.2f}%",
        )
    Console(width=200).print(table)

    result = {
        "benchmark": "des_speed",
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "simpy": simpy.__version__,
        },
        "parameters": {"writes": args.writes, "rtt_s": RTT, "chunk_size": 65536, "mtu": 4096},
        "results": rows,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
