"""Plots of sweep results: speedup heatmaps in the style of the paper's Fig 9.

A cell is ``T(baseline) / T(candidate)`` at one (size, drop) point for the mean or the
p99.9; values above 1 mean the candidate (EC) is faster. matplotlib runs headless (Agg).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sdr.errors import ConfigError
from sdr.units import format_size

__all__ = ["speedup_grid", "plot_speedup_heatmaps"]


def speedup_grid(
    rows: Sequence[dict[str, Any]], baseline: str, candidate: str, metric: str = "mean_s"
) -> tuple[list[int], list[float], np.ndarray]:
    """``(sizes, drops, ratio[size, drop])`` of ``baseline / candidate`` for ``metric``.

    Rows of other bandwidths or distances must be filtered out by the caller; NaN marks a
    missing point.
    """
    sizes = sorted({int(r["size_bytes"]) for r in rows})
    drops = sorted({float(r["drop"]) for r in rows})
    index = {(int(r["size_bytes"]), float(r["drop"]), r["scheme"]): r[metric] for r in rows}
    grid = np.full((len(sizes), len(drops)), np.nan)
    for i, size in enumerate(sizes):
        for j, drop in enumerate(drops):
            base, cand = index.get((size, drop, baseline)), index.get((size, drop, candidate))
            if base is not None and cand:
                grid[i, j] = base / cand
    return sizes, drops, grid


def plot_speedup_heatmaps(
    rows: Sequence[dict[str, Any]],
    path: str | Path,
    *,
    candidate: str | None = None,
    baselines: Sequence[str] | None = None,
    title: str = "",
    dpi: int = 80,
) -> Path:
    """Draw a grid of heatmaps: one column per baseline, rows for mean and p99.9.

    Defaults: the candidate is ``ec-mds`` (else ``ec-xor``) and the baselines are the SR
    schemes present in ``rows``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    present = {r["scheme"] for r in rows}
    candidate = candidate or ("ec-mds" if "ec-mds" in present else "ec-xor")
    baselines = list(baselines or [s for s in ("sr-rto", "sr-nack") if s in present])
    if candidate not in present or not baselines:
        raise ConfigError(
            f"speedup heatmaps need {candidate!r} (or another EC scheme) and an SR scheme in the "
            f"rows; the rows hold {sorted(present)}"
        )
    metrics = [("mean_s", "mean"), ("p999_s", "p99.9")]
    fig, axes = plt.subplots(
        len(metrics),
        len(baselines),
        figsize=(4.2 * len(baselines), 3.6 * len(metrics)),
        squeeze=False,
    )
    for (metric, label), ax_row in zip(metrics, axes, strict=True):
        for baseline, ax in zip(baselines, ax_row, strict=True):
            sizes, drops, grid = speedup_grid(rows, baseline, candidate, metric)
            bound = max(np.nanmax(np.abs(np.log10(grid))), 0.1) if np.isfinite(grid).any() else 1
            im = ax.imshow(
                grid,
                origin="lower",
                aspect="auto",
                cmap="RdBu",
                norm=LogNorm(vmin=10**-bound, vmax=10**bound),
            )
            ax.set_xticks(range(len(drops)), [f"{d:.0e}" for d in drops], rotation=45, fontsize=7)
            ax.set_yticks(range(len(sizes)), [format_size(s) for s in sizes], fontsize=7)
            ax.set_xlabel("drop probability", fontsize=8)
            ax.set_ylabel("write size", fontsize=8)
            ax.set_title(f"{label}: {baseline} / {candidate}", fontsize=9)
            if grid.size <= 150:
                for (i, j), value in np.ndenumerate(grid):
                    if np.isfinite(value):
                        ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=5.5)
            fig.colorbar(im, ax=ax, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
