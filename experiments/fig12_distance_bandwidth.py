"""Fig 12: longer distance or more bandwidth grows the BDP, so EC wins at larger writes.

For each (distance, bandwidth) the crossover is the largest write size at which EC-MDS(32,8)
beats the better SR scheme (SR RTO or SR NACK), on the exact analytic mean and p99.9.

    .venv/bin/python experiments/fig12_distance_bandwidth.py --out out/figures
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from figure_common import PAPER_FALLBACK, parser, save, setup, write_rows

from sdr.simulator import analytic
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec

DISTANCES_KM = [375, 1000, 3750, 10000]
RATES = [100e9, 400e9, 800e9]
FIG_DROPS = [1e-5, 1e-3]
METRICS = ["mean", "p999"]
SIZES = [2**e for e in range(17, 36)]  # 128 KiB .. 32 GiB


def _time(link: Link, size: int, drop: float, scheme: str, metric: str) -> float:
    spec = SchemeSpec(scheme, fallback=PAPER_FALLBACK)
    if metric == "mean":
        return analytic.scheme_mean(link, size, drop, spec)
    return analytic.scheme_quantile(0.999, link, size, drop, spec)


def crossover(link: Link, drop: float, sizes: list[int], metric: str) -> int | None:
    """Largest size where EC-MDS beats the better SR scheme on ``metric`` (None if never)."""
    best = None
    for size in sizes:
        ec = _time(link, size, drop, "ec-mds", metric)
        sr = min(_time(link, size, drop, s, metric) for s in ("sr-rto", "sr-nack"))
        if ec < sr:
            best = size
    return best


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write fig12_distance_bandwidth.{csv,png}; return the crossover range."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    out = setup(args)
    sizes = SIZES[::3] if args.quick else SIZES
    rows = []
    for metric in METRICS:
        for drop in FIG_DROPS:
            for km in DISTANCES_KM:
                for rate in RATES:
                    link = Link.from_distance(km * 1e3, rate)
                    cross = crossover(link, drop, sizes, metric)
                    rows.append(
                        {
                            "metric": metric,
                            "drop": drop,
                            "distance_km": km,
                            "rate": rate,
                            "rtt": link.rtt,
                            "bdp_bytes": link.bdp_bytes,
                            "ec_wins_up_to_bytes": cross if cross is not None else "",
                        }
                    )
    write_rows(rows, out / "fig12_distance_bandwidth.csv")
    fig, axes = plt.subplots(len(METRICS), len(FIG_DROPS), figsize=(10, 7), sharey=True)
    for metric, ax_row in zip(METRICS, axes, strict=True):
        for ax, drop in zip(ax_row, FIG_DROPS, strict=True):
            for i, rate in enumerate(RATES):  # one colour per line rate in every panel
                pts = [
                    (r["bdp_bytes"], r["ec_wins_up_to_bytes"])
                    for r in rows
                    if (r["metric"], r["drop"], r["rate"]) == (metric, drop, rate)
                    and r["ec_wins_up_to_bytes"] != ""
                ]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        marker="o",
                        color=f"C{i}",
                        label=f"{rate / 1e9:.0f} Gbit/s",
                    )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            ax.set_xlabel("bandwidth-delay product (bytes)", fontsize=8)
            ax.set_ylabel("write size (bytes)", fontsize=8)
            ax.set_title(f"largest write where EC wins ({metric}), drop {drop:g}", fontsize=9)
            ax.tick_params(labelsize=7)
            if ax.get_lines():
                ax.legend(fontsize=7)
    save(fig, out / "fig12_distance_bandwidth.png")
    result = {}
    for metric in METRICS:
        ratios = [
            r["ec_wins_up_to_bytes"] / r["bdp_bytes"]
            for r in rows
            if r["metric"] == metric and r["ec_wins_up_to_bytes"] != ""
        ]
        result[f"{metric}_crossover_over_bdp_min"] = min(ratios) if ratios else math.nan
        result[f"{metric}_crossover_over_bdp_max"] = max(ratios) if ratios else math.nan
    return result


if __name__ == "__main__":
    print(main())
