"""Run every paper-figure script (Figs 3, 9, 10, 12, 13, 15) and print their headlines.

.venv/bin/python experiments/make_figures.py --out out/figures [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

import fig03_sr_penalty
import fig09_ec_vs_sr
import fig10_schemes_by_size
import fig12_distance_bandwidth
import fig13_ring_allreduce
import fig15_offload_throughput

FIGURES = {
    "fig03": fig03_sr_penalty,
    "fig09": fig09_ec_vs_sr,
    "fig10": fig10_schemes_by_size,
    "fig12": fig12_distance_bandwidth,
    "fig13": fig13_ring_allreduce,
    "fig15": fig15_offload_throughput,
}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Run the selected figures; write headlines.json beside the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/figures")
    p.add_argument("--quick", action="store_true", help="small grids, few samples")
    p.add_argument("--only", nargs="*", choices=sorted(FIGURES), help="run only these")
    args = p.parse_args(argv)
    results = {}
    for name in args.only or FIGURES:
        start = time.perf_counter()
        sub = ["--out", args.out] + (["--quick"] if args.quick else [])
        results[name] = FIGURES[name].main(sub)
        print(f"{name}: {time.perf_counter() - start:.1f}s {results[name]}")
    with open(f"{args.out}/headlines.json", "w") as fh:
        json.dump(results, fh, indent=2)
    return results


if __name__ == "__main__":
    main()
