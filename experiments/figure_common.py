"""Shared settings of the paper-figure scripts: the paper's link, grids, CSV and plotting."""

from __future__ import annotations

import argparse
import csv
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from sdr.simulator.link import Link  # noqa: E402

#: 400 Gbit/s over 3750 km (25 ms RTT), 64 KiB chunks of 4 KiB packets, alpha = 2.
PAPER_LINK = Link.from_distance(3.75e6, 400e9)
SIZES = [2**e for e in range(17, 34)]  # 128 KiB .. 8 GiB
QUICK_SIZES = [2**e for e in range(17, 34, 4)]
DROPS = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]
QUICK_DROPS = [1e-6, 1e-4, 1e-2]
SCHEMES = ["sr-rto", "sr-nack", "ec-mds", "ec-xor"]
#: The paper's EC fallback (every data chunk of a failed submessage is resent); the
#: simulator's default is the SDK's ("protocol"), see docs/simulator.md.
PAPER_FALLBACK = "paper"
DPI = 80


def parser(description: str) -> argparse.ArgumentParser:
    """The options every figure script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default="out/figures", help="folder for the CSV and PNG")
    p.add_argument("--quick", action="store_true", help="small grid, few samples (smoke run)")
    p.add_argument("--samples", type=int, default=None, help="Monte Carlo samples per point")
    p.add_argument("--seed", type=int, default=0)
    return p


def setup(args: argparse.Namespace) -> Path:
    """Create the output folder and quiet logging."""
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_rows(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write rows (dicts with the same keys) as CSV."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def save(fig: plt.Figure, path: Path) -> Path:
    """Save a figure small enough to commit (PNG, 80 dpi) and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def analytic_rows(
    link: Link, sizes: Sequence[int], drops: Sequence[float], schemes: Sequence[str]
) -> list[dict[str, Any]]:
    """Exact analytic mean and p99.9 for every (scheme, size, drop)."""
    from sdr.simulator.evaluate import evaluate
    from sdr.simulator.schemes import SchemeSpec

    rows = []
    for scheme in schemes:
        for size in sizes:
            for drop in drops:
                est = evaluate(
                    link, size, drop, SchemeSpec(scheme, fallback=PAPER_FALLBACK), method="analytic"
                )
                rows.append(
                    {
                        "scheme": scheme,
                        "size_bytes": size,
                        "drop": drop,
                        "rate": link.rate,
                        "rtt": link.rtt,
                        "mean_s": est.mean_s,
                        "p999_s": est.p999_s,
                        "ideal_s": est.ideal_s,
                        "slowdown_mean": est.slowdown_mean,
                        "slowdown_p999": est.slowdown_p999,
                        "fallback_probability": est.fallback_probability,
                    }
                )
    return rows


def heatmap(
    ax: Any, grid: Any, sizes: Sequence[int], drops: Sequence[float], title: str, **kw: Any
):
    """One annotated size x drop heatmap (log colour scale)."""
    import numpy as np
    from matplotlib.colors import LogNorm

    from sdr.units import format_size

    finite = grid[np.isfinite(grid)]
    vmin = kw.pop("vmin", max(finite.min(), 1e-3) if finite.size else 1)
    vmax = kw.pop("vmax", max(finite.max(), vmin * 1.01) if finite.size else 10)
    im = ax.imshow(
        grid,
        origin="lower",
        aspect="auto",
        norm=LogNorm(vmin=vmin, vmax=vmax),
        cmap=kw.pop("cmap", "viridis"),
    )
    ax.set_xticks(range(len(drops)), [f"{d:.0e}" for d in drops], rotation=45, fontsize=7)
    ax.set_yticks(range(len(sizes)), [format_size(s) for s in sizes], fontsize=7)
    ax.set_xlabel("drop probability (per chunk)", fontsize=8)
    ax.set_ylabel("write size", fontsize=8)
    ax.set_title(title, fontsize=9)
    if grid.size <= 150:
        for (i, j), value in np.ndenumerate(grid):
            if np.isfinite(value):
                ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=5.5, color="w")
    ax.figure.colorbar(im, ax=ax, shrink=0.8)
    return im


def pivot(rows: Sequence[dict[str, Any]], scheme: str, key: str, sizes, drops):
    """``grid[size, drop]`` of ``key`` for one scheme."""
    import numpy as np

    index = {(r["size_bytes"], r["drop"]): r[key] for r in rows if r["scheme"] == scheme}
    return np.array([[index.get((s, d), np.nan) for d in drops] for s in sizes], dtype=float)
