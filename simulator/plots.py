"""Plots of sweep results: speedup heatmaps in the style of the paper's Fig 9.

A cell is ``T(baseline) / T(candidate)`` at one (size, drop) point for the mean or the
p99.9; values above 1 mean the candidate (EC) is faster. Where a row has the exact
analytic value of a metric it is used, else the sampled one. Every path swept (rate
x RTT or distance) gets its own row of panels, labelled; the parameters common to all
rows (link, chunk, MTU, EC code, drop unit) are in the title. matplotlib runs headless
(Agg).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sdr.errors import ConfigError
from sdr.units import format_rate, format_size, format_time

__all__ = [
    "format_probability",
    "plain_log_axis",
    "plot_speedup_heatmaps",
    "speedup_figure",
    "speedup_grid",
]

#: metric -> the row key of its exact analytic value, preferred where a row has one
_ANALYTIC = {"mean_s": "analytic_mean_s", "p999_s": "analytic_p999_s"}
_EC = ("ec-mds", "ec-xor")
_SR = ("sr-rto", "sr-nack")


def _value(row: dict[str, Any], metric: str) -> float | None:
    exact = row.get(_ANALYTIC.get(metric, ""))
    if exact is not None and math.isfinite(exact):
        return float(exact)
    value = row.get(metric)
    return None if value is None else float(value)


def speedup_grid(
    rows: Sequence[dict[str, Any]], baseline: str, candidate: str, metric: str = "mean_s"
) -> tuple[list[int], list[float], np.ndarray]:
    """``(sizes, drops, ratio[size, drop])`` of ``baseline / candidate`` for ``metric``.

    The analytic value of ``metric`` is used where a row has one. Rows of other
    rates or distances must be filtered out by the caller; NaN marks a missing point.
    """
    sizes = sorted({int(r["size_bytes"]) for r in rows})
    drops = sorted({float(r["drop"]) for r in rows})
    index = {(int(r["size_bytes"]), float(r["drop"]), r["scheme"]): _value(r, metric) for r in rows}
    grid = np.full((len(sizes), len(drops)), np.nan)
    for i, size in enumerate(sizes):
        for j, drop in enumerate(drops):
            base, cand = index.get((size, drop, baseline)), index.get((size, drop, candidate))
            if base is not None and cand:
                grid[i, j] = base / cand
    return sizes, drops, grid


def plain_log_axis(ax: Any, seconds: bool = False) -> None:
    """A log y axis labelled in plain numbers (``300 ms``, ``0.02``), majors and minors
    alike, not matplotlib's ``3x10^-1``; ``seconds``: the values are seconds."""
    import matplotlib.ticker

    ax.set_yscale("log")
    if seconds:
        form = matplotlib.ticker.FuncFormatter(lambda v, _: format_time(v))
    else:
        form = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(form)
    ax.yaxis.set_minor_formatter(form)
    ax.tick_params(axis="y", which="both", labelsize=7)


def format_probability(p: float) -> str:
    """``1e-4``, ``2.5e-3``, ``0.5``: a probability as a short tick label."""
    if p == 0 or p >= 0.1:
        return f"{p:g}"
    mantissa, exponent = f"{p:.1e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def _cell_text(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.2f}"


def _path_key(row: dict[str, Any]) -> tuple[float, float, float | None]:
    return (float(row["rate"]), float(row["rtt"]), row.get("distance"))


def _path_label(key: tuple[float, float, float | None]) -> str:
    rate, rtt, distance = key
    where = f"RTT {format_time(rtt)}"
    if distance:
        where = f"{distance / 1e3:g} km ({where})"
    return f"{format_rate(rate)}, {where}"


def _common_caption(rows: Sequence[dict[str, Any]], paths: list[tuple]) -> str:
    """The parameters every row shares, for the title."""
    first = rows[0]
    unit = first.get("drop_unit", "chunk")
    parts = []
    if len(paths) == 1:
        parts.append(_path_label(paths[0]))
    parts.append(f"chunk {format_size(int(first['chunk_size']))}")
    parts.append(f"MTU {format_size(int(first['mtu']))}")
    parts.append(f"alpha {first['alpha']:g}")
    parts.append(f"EC ({first['k']},{first['m']})")
    parts.append(f"drop per {unit}")
    if first["method"] == "analytic":
        parts.append("analytic")
    else:
        parts.append(f"{first['method']}, {first['samples']} samples")
    return ", ".join(parts)


def _text_colour(rgba: Sequence[float]) -> str:
    """Black on light cells, white on dark ones (relative luminance, ITU-R BT.709)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def _nice_ticks(bound: float) -> list[float]:
    """Colour-bar ticks 1/x .. x at powers of 2 (or 10 for wide ranges) inside ``10**bound``."""
    top = 10**bound
    base = 2.0 if top <= 64 else 10.0
    n = max(1, int(math.floor(math.log(top, base) + 1e-9)))
    ticks = [base**e for e in range(-n, n + 1)]
    if len(ticks) > 9:
        ticks = ticks[:: math.ceil(len(ticks) / 9)]
    return ticks


def plot_speedup_heatmaps(
    rows: Sequence[dict[str, Any]],
    path: str | Path,
    *,
    candidates: Sequence[str] | None = None,
    baselines: Sequence[str] | None = None,
    title: str = "speedup of EC over SR (>1: EC faster)",
    dpi: int = 110,
) -> Path:
    """Draw :func:`speedup_figure` to the PNG ``path``."""
    import matplotlib.pyplot as plt

    fig = speedup_figure(rows, candidates=candidates, baselines=baselines, title=title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def speedup_figure(
    rows: Sequence[dict[str, Any]],
    *,
    candidates: Sequence[str] | None = None,
    baselines: Sequence[str] | None = None,
    title: str = "speedup of EC over SR (>1: EC faster)",
) -> Any:
    """The heatmaps as a matplotlib Figure: a column per (candidate, baseline) pair, a row
    per metric and path.

    Defaults: the candidates are the EC schemes (``ec-mds``, ``ec-xor``) and the baselines
    the SR schemes present in ``rows``. Every path (rate, RTT) in ``rows`` gets its
    own rows of panels, labelled with it; one colour scale (log, centred on 1) for all.
    Cell labels are black on light cells and white on dark ones.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FixedLocator, NullLocator

    if not rows:
        raise ConfigError("no rows to plot")
    present = {r["scheme"] for r in rows}
    candidates = [c for c in (candidates or _EC) if c in present]
    baselines = [b for b in (baselines or _SR) if b in present]
    if not candidates or not baselines:
        raise ConfigError(
            "speedup heatmaps need an EC scheme (ec-mds, ec-xor) and an SR scheme (sr-rto, "
            f"sr-nack) in the rows; the rows hold {sorted(present)}"
        )
    paths = sorted({_path_key(r) for r in rows}, key=lambda k: (k[0], k[1]))
    pairs = [(c, b) for c in candidates for b in baselines]
    metrics = [("mean_s", "mean"), ("p999_s", "p99.9")]
    panels = []  # (path, metric, label, pair, grid, sizes, drops)
    for key in paths:
        path_rows = [r for r in rows if _path_key(r) == key]
        for metric, label in metrics:
            for pair in pairs:
                sizes, drops, grid = speedup_grid(path_rows, pair[1], pair[0], metric)
                panels.append((key, label, pair, grid, sizes, drops))
    finite = [np.abs(np.log10(p[3][np.isfinite(p[3])])) for p in panels]
    # a little headroom, so a tick at the extreme (x4 exactly) stays on the colour bar
    bound = 1.01 * max([float(f.max()) for f in finite if f.size] + [math.log10(2)])
    norm = LogNorm(vmin=10**-bound, vmax=10**bound)
    cmap = plt.get_cmap("RdBu")

    n_rows, n_cols = len(paths) * len(metrics), len(pairs)
    n_sizes = len(panels[0][4])
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(3.6 * n_cols + 1.2, (1.2 + 0.17 * n_sizes) * n_rows + 0.9),
        squeeze=False,
        layout="constrained",
    )
    unit = rows[0].get("drop_unit", "chunk")
    for (key, label, (cand, base), grid, sizes, drops), ax in zip(
        panels, axes.ravel(), strict=True
    ):
        im = ax.imshow(grid, origin="lower", aspect="auto", cmap=cmap, norm=norm)
        ax.set_xticks(range(len(drops)), [format_probability(d) for d in drops], fontsize=7)
        ax.set_yticks(range(len(sizes)), [format_size(s) for s in sizes], fontsize=7)
        ax.set_xlabel(f"drop probability per {unit}", fontsize=7)
        ax.set_ylabel("write size", fontsize=7)
        where = f"{_path_label(key)}\n" if len(paths) > 1 else ""
        ax.set_title(f"{where}{label}: {base} / {cand}", fontsize=8)
        if grid.size <= 200:
            size = 7 if grid.shape[0] <= 10 else 6
            for (i, j), value in np.ndenumerate(grid):
                if np.isfinite(value):
                    colour = _text_colour(cmap(norm(value)))
                    ax.text(j, i, _cell_text(value), ha="center", va="center", fontsize=size,
                            color=colour)  # fmt: skip
    bar = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=min(1.0, 4 / n_rows + 0.3))
    bar.set_label("speedup (x)", fontsize=8)
    ticks = _nice_ticks(bound)
    bar.ax.yaxis.set_major_locator(FixedLocator(ticks))
    bar.ax.yaxis.set_minor_locator(NullLocator())
    bar.ax.set_yticklabels([f"{t:g}" for t in ticks], fontsize=7)
    fig.suptitle(f"{title}\n{_common_caption(rows, paths)}", fontsize=9)
    return fig
