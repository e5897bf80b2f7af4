"""Fig 3: Selective Repeat's slowdown over the ideal write, by write size and drop rate.

The ideal is the lossless time ``M*T_INJ + RTT``. Exact analytic mean and p99.9 (product
CDF) for SR with RTO = 3 RTT and with NACKs (RTO = 1 RTT), 400 Gbit/s, 3750 km.

    .venv/bin/python experiments/fig03_sr_penalty.py --out out/figures
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from figure_common import (
    DROPS,
    PAPER_LINK,
    QUICK_DROPS,
    QUICK_SIZES,
    SIZES,
    analytic_rows,
    heatmap,
    parser,
    pivot,
    save,
    setup,
    write_rows,
)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write fig03_sr_penalty.{csv,png}; return headline numbers."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    out = setup(args)
    sizes, drops = (QUICK_SIZES, QUICK_DROPS) if args.quick else (SIZES, DROPS)
    rows = analytic_rows(PAPER_LINK, sizes, drops, ["sr-rto", "sr-nack"])
    write_rows(rows, out / "fig03_sr_penalty.csv")
    fig, axes = plt.subplots(2, 2, figsize=(9, 7))
    for col, scheme in enumerate(("sr-rto", "sr-nack")):
        for row, (key, label) in enumerate((("slowdown_mean", "mean"), ("slowdown_p999", "p99.9"))):
            grid = pivot(rows, scheme, key, sizes, drops)
            heatmap(
                axes[row][col], grid, sizes, drops, f"{scheme} {label} slowdown", vmin=1, vmax=20
            )
    fig.suptitle("SR slowdown over the ideal write (400 Gbit/s, 25 ms RTT)", fontsize=10)
    save(fig, out / "fig03_sr_penalty.png")
    return {
        "sr_rto_max_slowdown_mean": max(
            r["slowdown_mean"] for r in rows if r["scheme"] == "sr-rto"
        ),
        "sr_rto_max_slowdown_p999": max(
            r["slowdown_p999"] for r in rows if r["scheme"] == "sr-rto"
        ),
        "sr_nack_max_slowdown_mean": max(
            r["slowdown_mean"] for r in rows if r["scheme"] == "sr-nack"
        ),
    }


if __name__ == "__main__":
    print(main())
