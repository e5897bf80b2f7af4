"""Fig 12: longer distance or more bandwidth grows the BDP, so EC wins at larger writes.

For each (distance, bandwidth) the crossover is the largest write size at which EC-MDS(32,8)
has a lower analytic mean than the better SR scheme (SR RTO or SR NACK).

    .venv/bin/python experiments/fig12_distance_bandwidth.py --out out/figures
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from figure_common import parser, save, setup, write_rows

from simulator import analytic
from simulator.link import Link
from simulator.schemes import SchemeSpec

DISTANCES_KM = [375, 1000, 3750, 10000]
BANDWIDTHS = [100e9, 400e9, 800e9]
FIG_DROPS = [1e-6, 1e-4]
SIZES = [2**e for e in range(17, 36)]  # 128 KiB .. 32 GiB


def crossover(link: Link, drop: float, sizes: list[int]) -> int | None:
    """Largest size where EC-MDS beats the better SR scheme on the mean (None if never)."""
    best = None
    for size in sizes:
        ec = analytic.scheme_mean(link, size, drop, SchemeSpec("ec-mds"))
        sr = min(
            analytic.scheme_mean(link, size, drop, SchemeSpec(s)) for s in ("sr-rto", "sr-nack")
        )
        if ec < sr:
            best = size
    return best


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write fig12_distance_bandwidth.{csv,png}; return the crossover range."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    out = setup(args)
    sizes = SIZES[::3] if args.quick else SIZES
    rows = []
    for drop in FIG_DROPS:
        for km in DISTANCES_KM:
            for bw in BANDWIDTHS:
                link = Link.from_distance(km * 1e3, bw)
                cross = crossover(link, drop, sizes)
                rows.append(
                    {
                        "drop": drop,
                        "distance_km": km,
                        "bandwidth_bps": bw,
                        "rtt_s": link.rtt_s,
                        "bdp_bytes": link.bdp_bytes,
                        "ec_wins_up_to_bytes": cross if cross is not None else "",
                    }
                )
    write_rows(rows, out / "fig12_distance_bandwidth.csv")
    fig, axes = plt.subplots(1, len(FIG_DROPS), figsize=(10, 4), sharey=True)
    for ax, drop in zip(axes, FIG_DROPS, strict=True):
        for bw in BANDWIDTHS:
            pts = [
                (r["bdp_bytes"], r["ec_wins_up_to_bytes"])
                for r in rows
                if r["drop"] == drop and r["bandwidth_bps"] == bw and r["ec_wins_up_to_bytes"] != ""
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"{bw / 1e9:.0f} Gbit/s")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("bandwidth-delay product (bytes)", fontsize=8)
        ax.set_title(f"largest write where EC wins, drop {drop:g}", fontsize=9)
        ax.tick_params(labelsize=7)
        if ax.get_lines():
            ax.legend(fontsize=7)
    axes[0].set_ylabel("write size (bytes)", fontsize=8)
    save(fig, out / "fig12_distance_bandwidth.png")
    found = [r for r in rows if r["ec_wins_up_to_bytes"] != ""]
    ratios = [r["ec_wins_up_to_bytes"] / r["bdp_bytes"] for r in found]
    return {
        "crossover_over_bdp_min": min(ratios) if ratios else math.nan,
        "crossover_over_bdp_max": max(ratios) if ratios else math.nan,
    }


if __name__ == "__main__":
    print(main())
