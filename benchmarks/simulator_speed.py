"""How fast the simulator sweeps the paper's Fig 9 grid (benchmark, not a test).

Grid: 17 write sizes (128 KiB .. 8 GiB) x 7 drop rates (1e-7 .. 1e-1) x 4 schemes, 1000
Monte Carlo samples per point, 400 Gbit/s, 25 ms RTT, 64 KiB chunks. Each point also
computes the exact analytic mean and p99.9 as a cross-check, as ``sdr sweep`` does.

Peer in the same run: a naive Monte Carlo that draws one geometric variable per chunk per
sample, on the sub-grid where it is affordable (writes up to --naive-max-size); the ratio
of the two on that sub-grid is reported.

    .venv/bin/python benchmarks/simulator_speed.py --workers 2 --json out/simulator_speed.json
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
from rich.console import Console
from rich.table import Table

from sdr.simulator.analytic import retry_cost_s
from sdr.simulator.link import Link
from sdr.simulator.montecarlo import sample_scheme
from sdr.simulator.schemes import SchemeSpec
from sdr.simulator.sweep import make_grid, run_sweep
from sdr.units import parse_size

SIZES = [2**e for e in range(17, 34)]
DROPS = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]
SCHEMES = ["sr-rto", "sr-nack", "ec-mds", "ec-xor"]


def naive_sr(rng: np.random.Generator, link: Link, size: int, p: float, spec: SchemeSpec, n: int):
    """One geometric draw per chunk per sample (the textbook way)."""
    chunks = link.num_chunks(size)
    z = rng.geometric(1 - p, size=(n, chunks)) - 1
    return (np.arange(1, chunks + 1) * link.t_inj_s + retry_cost_s(link, spec) * z).max(
        axis=1
    ) + link.rtt


def time_sr_samplers(max_size: int, samples: int) -> tuple[float, float, int]:
    """(record sampler seconds, naive sampler seconds, points) on the SR sub-grid."""
    link = Link(400e9, 0.025)
    rng = np.random.default_rng(0)
    points = [
        (s, d, SchemeSpec(name))
        for s in SIZES
        if s <= max_size
        for d in DROPS
        for name in ("sr-rto", "sr-nack")
    ]
    start = time.perf_counter()
    for size, drop, spec in points:
        sample_scheme(rng, link, size, drop, spec, samples)
    fast = time.perf_counter() - start
    start = time.perf_counter()
    for size, drop, spec in points:
        naive_sr(rng, link, size, drop, spec, samples)
    naive = time.perf_counter() - start
    return fast, naive, len(points)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="local worker processes")
    parser.add_argument("--naive-max-size", default="256MiB")
    parser.add_argument("--json", default="out/simulator_speed.json", help="result file")
    args = parser.parse_args(argv)

    points = make_grid(
        SIZES, DROPS, SCHEMES, rates=[400e9], rtts=[0.025], samples=args.samples, seed=0
    )
    timings = {}
    for executor, workers in (("serial", 1), ("local", args.workers)):
        start = time.perf_counter()
        rows = run_sweep(points, executor=executor, workers=workers)
        timings[f"{executor} ({workers} proc)"] = time.perf_counter() - start
    worst = max(abs(r["mean_s"] / r["analytic_mean_s"] - 1) for r in rows)
    fast, naive, sub = time_sr_samplers(parse_size(args.naive_max_size), args.samples)

    table = Table(title=f"Fig 9 grid: {len(points)} points x {args.samples} samples")
    table.add_column("what")
    table.add_column("seconds", justify="right")
    table.add_column("points/s", justify="right")
    for name, secs in timings.items():
        table.add_row(f"sweep, {name}", f"{secs:.2f}", f"{len(points) / secs:.0f}")
    table.add_row(f"SR record sampler ({sub} pts <= {args.naive_max_size})", f"{fast:.3f}", "")
    table.add_row(f"SR naive per-chunk sampler (same {sub} pts)", f"{naive:.3f}", "")
    table.add_row("naive / record", f"{naive / fast:.1f}x", "")
    table.add_row("max |MC mean / analytic - 1|", f"{worst:.4f}", "")
    Console().print(table)

    result = {
        "benchmark": "simulator_speed",
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "parameters": {
            "sizes": SIZES,
            "drops": DROPS,
            "schemes": SCHEMES,
            "samples": args.samples,
            "rate": 400e9,
            "rtt": 0.025,
            "chunk_size": 65536,
            "workers": args.workers,
        },
        "results": {
            "points": len(points),
            "sweep_seconds": timings,
            "sr_subgrid_points": sub,
            "sr_record_sampler_s": fast,
            "sr_naive_sampler_s": naive,
            "naive_over_record": naive / fast,
            "max_rel_mc_vs_analytic_mean": worst,
        },
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
