"""Fig 10: slowdown of the four schemes versus write size at fixed drop rates.

Shows NACK's gain over RTO, where SR beats EC (huge writes, clean links: EC pays its 25%
parity) and where EC stops helping (drop ~1e-1). Exact analytic mean and p99.9.

    .venv/bin/python experiments/fig10_schemes_by_size.py --out out/figures
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from figure_common import (
    PAPER_LINK,
    QUICK_SIZES,
    SCHEMES,
    SIZES,
    analytic_rows,
    parser,
    save,
    setup,
    write_rows,
)

FIG_DROPS = [1e-6, 1e-4, 1e-2, 1e-1]


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write fig10_schemes_by_size.{csv,png}; return headline numbers."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    out = setup(args)
    sizes = QUICK_SIZES if args.quick else SIZES
    rows = analytic_rows(PAPER_LINK, sizes, FIG_DROPS, SCHEMES)
    write_rows(rows, out / "fig10_schemes_by_size.csv")
    fig, axes = plt.subplots(2, len(FIG_DROPS), figsize=(13, 6), sharex=True)
    for col, drop in enumerate(FIG_DROPS):
        for row, key in enumerate(("slowdown_mean", "slowdown_p999")):
            ax = axes[row][col]
            for scheme in SCHEMES:
                pts = [
                    (r["size_bytes"], r[key])
                    for r in rows
                    if r["scheme"] == scheme and r["drop"] == drop
                ]
                ax.plot(*zip(*pts, strict=True), marker=".", label=scheme)
            ax.set_xscale("log", base=2)
            ax.set_title(f"drop {drop:g}: {'mean' if row == 0 else 'p99.9'}", fontsize=9)
            ax.set_ylabel("slowdown vs ideal", fontsize=8)
            ax.tick_params(labelsize=7)
            if row == 1:
                ax.set_xlabel("write size (bytes)", fontsize=8)
    axes[0][0].legend(fontsize=7)
    save(fig, out / "fig10_schemes_by_size.png")

    def get(scheme: str, size: int, drop: float, key: str = "mean_s") -> float:
        return next(
            r[key]
            for r in rows
            if (r["scheme"], r["size_bytes"], r["drop"]) == (scheme, size, drop)
        )

    nack_gain = max(get("sr-rto", s, d) / get("sr-nack", s, d) for s in sizes for d in FIG_DROPS)
    sr_wins = [
        s
        for s in sizes
        if min(get("sr-rto", s, 1e-6), get("sr-nack", s, 1e-6)) * 1.01
        < min(get("ec-mds", s, 1e-6), get("ec-xor", s, 1e-6))
    ]
    return {
        "max_nack_over_rto_mean": nack_gain,
        "smallest_size_sr_wins_by_1pct_at_1e-6": float(min(sr_wins)) if sr_wins else float("nan"),
        "ec_mds_slowdown_mean_32MiB_1e-1": get("ec-mds", 2**25, 1e-1, "slowdown_mean"),
        "sr_nack_slowdown_mean_32MiB_1e-1": get("sr-nack", 2**25, 1e-1, "slowdown_mean"),
        "ec_mds_slowdown_p999_32MiB_1e-1": get("ec-mds", 2**25, 1e-1, "slowdown_p999"),
        "sr_nack_slowdown_p999_32MiB_1e-1": get("sr-nack", 2**25, 1e-1, "slowdown_p999"),
    }


if __name__ == "__main__":
    print(main())
