"""Fig 9: speedup of erasure coding over Selective Repeat (mean and p99.9), by size and drop.

Monte Carlo (1000 samples per point, as the paper validates) over the whole grid with
``sdr.simulator.sweep`` on local processes; every row also carries the exact analytic mean and
p99.9, so the CSV shows sampling error beside the value.

    .venv/bin/python experiments/fig09_ec_vs_sr.py --out out/figures
"""

from __future__ import annotations

from figure_common import (
    DROPS,
    PAPER_FALLBACK,
    PAPER_LINK,
    QUICK_DROPS,
    QUICK_SIZES,
    SCHEMES,
    SIZES,
    parser,
    setup,
)

from sdr.simulator.plots import plot_speedup_heatmaps, speedup_grid
from sdr.simulator.sweep import make_grid, run_sweep, write_csv


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write fig09_ec_vs_sr.{csv,png}; return headline speedups."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    out = setup(args)
    sizes, drops = (QUICK_SIZES, QUICK_DROPS) if args.quick else (SIZES, DROPS)
    samples = args.samples or (200 if args.quick else 1000)
    points = make_grid(
        sizes,
        drops,
        SCHEMES,
        rates=[PAPER_LINK.rate],
        distances=[3.75e6],
        samples=samples,
        seed=args.seed,
        fallback=PAPER_FALLBACK,
    )
    rows = run_sweep(points, executor="local")
    write_csv(rows, out / "fig09_ec_vs_sr.csv")
    plot_speedup_heatmaps(
        rows, out / "fig09_ec_vs_sr.png", title="Speedup of EC-MDS(32,8) over SR (>1: EC faster)"
    )
    result = {}
    for base in ("sr-rto", "sr-nack"):
        for metric in ("mean_s", "p999_s"):
            _, _, grid = speedup_grid(rows, base, "ec-mds", metric)
            result[f"max_{metric[:-2]}_speedup_over_{base}"] = float(grid.max())
            result[f"min_{metric[:-2]}_speedup_over_{base}"] = float(grid.min())
    return result


if __name__ == "__main__":
    print(main())
