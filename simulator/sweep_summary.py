"""How a sweep's answer moves with its swept path parameters, in one figure.

The heatmaps of :mod:`sdr.simulator.plots` show one path (rate, RTT) at a time: a
sweep over 3 RTTs x 4 rates is 12 rows of panels and no view of the trend. The
summary reduces each path and drop rate to one number, the **crossover size**: the
smallest write size from which the best SR scheme is at least as fast as the best EC
scheme at every larger size of the grid (EC's parity costs a fixed share of the line rate,
so for large enough writes SR wins; below the crossover EC's one-round repair wins). A
figure then has a row per swept dimension (RTT, rate) with the crossover against it,
one line per drop rate and one panel per value of the other dimension.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sdr.errors import ConfigError
from sdr.units import format_rate, format_size, format_time

__all__ = ["crossover_size", "crossovers", "plot_sweep_summary", "swept_dimensions"]

_METRICS = {"mean_s": "mean", "p999_s": "p99.9"}


def _best(rows: Sequence[dict[str, Any]], family: str, metric: str) -> dict[int, float]:
    """The best (smallest) ``metric`` per size over the schemes of ``family`` ("sr"/"ec")."""
    best: dict[int, float] = {}
    for r in rows:
        value = r.get(metric)
        if not str(r["scheme"]).startswith(family + "-") or value in (None, ""):
            continue
        size = int(r["size_bytes"])
        best[size] = min(best.get(size, float("inf")), float(value))
    return best


def crossover_size(rows: Sequence[dict[str, Any]], metric: str = "p999_s") -> int | None:
    """The smallest size of ``rows`` (one path, one drop rate) from which the best SR is at
    least as fast as the best EC at every larger size; None when EC wins at the largest
    size (the crossover lies above the grid). The smallest size of the grid means SR wins
    everywhere. ConfigError when ``rows`` lack either family."""
    sr, ec = _best(rows, "sr", metric), _best(rows, "ec", metric)
    sizes = sorted(set(sr) & set(ec))
    if not sizes:
        raise ConfigError("the sweep summary needs an SR and an EC scheme at the same sizes")
    crossover: int | None = None
    for size in reversed(sizes):
        if sr[size] > ec[size]:
            break
        crossover = size
    return crossover


def _path(row: dict[str, Any]) -> tuple[float, float]:
    return float(row["rate"]), float(row["rtt"])


def crossovers(
    rows: Sequence[dict[str, Any]], metric: str = "p999_s"
) -> dict[tuple[float, float, float], int | None]:
    """:func:`crossover_size` per (rate, RTT, drop) of the sweep's rows."""
    groups: dict[tuple[float, float, float], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((*_path(r), float(r["drop"])), []).append(r)
    return {key: crossover_size(group, metric) for key, group in sorted(groups.items())}


def swept_dimensions(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The path parameters with more than one value in ``rows``: "rtt", "rate"."""
    rates = {_path(r)[0] for r in rows}
    rtts = {_path(r)[1] for r in rows}
    return [name for name, values in (("rtt", rtts), ("rate", rates)) if len(values) > 1]


def plot_sweep_summary(
    rows: Sequence[dict[str, Any]], path: str | Path, metric: str = "p999_s", dpi: int = 110
) -> Path:
    """Draw the crossover size against each swept dimension to the PNG ``path``: a row of
    panels per swept dimension (x: that dimension, log), a panel per value of the other
    one, a line per drop rate; a crossover above the grid is drawn as an open marker at
    the top edge. ConfigError when the rows sweep neither RTT nor rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = swept_dimensions(rows)
    if not dims:
        raise ConfigError("the sweep summary needs more than one RTT or rate")
    table = crossovers(rows, metric)
    sizes = sorted({int(r["size_bytes"]) for r in rows})
    rates = sorted({k[0] for k in table})
    rtts = sorted({k[1] for k in table})
    drops = sorted({k[2] for k in table})
    columns = max(len(rtts) if "rate" in dims else 1, len(rates) if "rtt" in dims else 1)
    width = max(6.0, 4.0 * columns)
    fig, axes = plt.subplots(
        len(dims), columns, figsize=(width, 3.4 * len(dims) + 0.6), squeeze=False
    )
    colours = plt.get_cmap("viridis")
    for row, dim in enumerate(dims):
        xs, others = (rtts, rates) if dim == "rtt" else (rates, rtts)
        for col in range(columns):
            ax = axes[row][col]
            if col >= len(others):
                ax.set_visible(False)
                continue
            other = others[col]
            for i, drop in enumerate(drops):
                colour = colours(i / max(1, len(drops) - 1))
                keys = [(other, x, drop) if dim == "rtt" else (x, other, drop) for x in xs]
                found = [(x, table[k]) for x, k in zip(xs, keys, strict=True) if k in table]
                ax.plot(
                    [x for x, _ in found],
                    [sizes[-1] * 2 if c is None else c for _, c in found],
                    "o-",
                    color=colour,
                    label=f"drop {drop:g}",
                )
                above = [x for x, c in found if c is None]
                if above:
                    ax.plot(above, [sizes[-1] * 2] * len(above), "o", mfc="white", color=colour)
            ax.set_xscale("log")
            ax.set_yscale("log", base=2)
            ticks = sizes[:: max(1, len(sizes) // 6)]
            ax.set_yticks(ticks, [format_size(s) for s in ticks])
            ax.set_xticks(xs, [format_time(x) if dim == "rtt" else format_rate(x) for x in xs])
            ax.minorticks_off()
            ax.set_xlabel("RTT" if dim == "rtt" else "line rate")
            ax.set_ylabel("crossover size")
            ax.set_title(format_rate(other) if dim == "rtt" else f"RTT {format_time(other)}")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    title = (
        f"Write size from which SR is as fast as EC ({_METRICS.get(metric, metric)}, best "
        "of each family); below it EC wins. At the smallest size: SR wins at every size; "
        "open markers: EC wins up to the largest size."
    )
    fig.suptitle(textwrap.fill(title, width=int(width * 13)), fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
