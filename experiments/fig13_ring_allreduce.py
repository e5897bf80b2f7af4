"""Fig 13: ring allreduce across 2..8 datacenters, EC over SR speedup by drop rate.

Monte Carlo of T(i,r) = max(T(i-1,r-1), T(i,r-1)) + t(i,r) with per-stage writes sampled
from each scheme; a 1 GiB buffer, 400 Gbit/s, 3750 km between neighbours.

    .venv/bin/python experiments/fig13_ring_allreduce.py --out out/figures
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from figure_common import PAPER_FALLBACK, PAPER_LINK, parser, save, setup, write_rows

from sdr.simulator.collective import simulate_ring_allreduce
from sdr.simulator.schemes import SchemeSpec

DCS = [2, 4, 6, 8]
FIG_DROPS = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2]
BUFFER = 2**30


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write fig13_ring_allreduce.{csv,png}; return the p99.9 speedup range."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    out = setup(args)
    samples = args.samples or (300 if args.quick else 5000)
    dcs_list = DCS[:2] if args.quick else DCS
    rows = []
    for dcs in dcs_list:
        for drop in FIG_DROPS:
            res = {
                s: simulate_ring_allreduce(
                    PAPER_LINK,
                    BUFFER,
                    dcs,
                    drop,
                    SchemeSpec(s, fallback=PAPER_FALLBACK),
                    samples=samples,
                    seed=args.seed,
                )
                for s in ("sr-rto", "sr-nack", "ec-mds")
            }
            row = {"dcs": dcs, "drop": drop, "buffer_bytes": BUFFER, "samples": samples}
            for s, r in res.items():
                row[f"{s}_mean_s"] = r.summary.mean
                row[f"{s}_p999_s"] = r.summary.quantiles["p999"]
            for base in ("sr-rto", "sr-nack"):
                row[f"speedup_p999_over_{base}"] = row[f"{base}_p999_s"] / row["ec-mds_p999_s"]
                row[f"speedup_mean_over_{base}"] = row[f"{base}_mean_s"] / row["ec-mds_mean_s"]
            rows.append(row)
    write_rows(rows, out / "fig13_ring_allreduce.csv")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, base in zip(axes, ("sr-rto", "sr-nack"), strict=True):
        for dcs in dcs_list:
            pts = [(r["drop"], r[f"speedup_p999_over_{base}"]) for r in rows if r["dcs"] == dcs]
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"{dcs} DCs")
        ax.set_xscale("log")
        ax.set_xlabel("drop probability (per chunk)", fontsize=8)
        ax.set_ylabel("p99.9 speedup", fontsize=8)
        ax.set_title(f"ring allreduce 1 GiB: {base} / ec-mds at p99.9", fontsize=9)
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.legend(fontsize=7)
    save(fig, out / "fig13_ring_allreduce.png")
    sp = [r["speedup_p999_over_sr-rto"] for r in rows]
    return {"min_p999_speedup_over_sr_rto": min(sp), "max_p999_speedup_over_sr_rto": max(sp)}


if __name__ == "__main__":
    print(main())
