"""The figure of ``benchmarks.congestion_emulated``: throughput over time per flow (and
the probe's queue delay) for every compete and pair run, the loss scenario as bars."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np


def plot(doc: dict[str, Any], path: str) -> None:
    """Throughput over time per flow (and the probe's queue delay) for every compete and
    pair run; the loss scenario as bars of completion time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    compete = [r for r in doc["compete"] if "series" in r]
    pair = [r for r in doc["pair"] if "series" in r]
    loss = [r for r in doc["loss"] if "median_s" in r]
    panels = len(compete) + len(pair) + (1 if loss else 0)
    if not panels:
        return
    cols = min(3, panels)
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.0 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax, r in zip(flat, compete, strict=False):
        _plot_compete(ax, r)
    for ax, r in zip(flat[len(compete) :], pair, strict=False):
        _plot_pair(ax, r)
    if loss:
        _plot_loss(flat[len(compete) + len(pair)], loss)
    for ax in flat[panels:]:
        ax.axis("off")
    fig.tight_layout()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    _shrink_png(path)


def _shrink_png(path: str) -> None:
    """Re-save the figure with a 64-colour palette (a few plain colours: ~3x smaller)."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=64)
    small.save(path, optimize=True)


def _times(series: dict[str, Any], n: int) -> np.ndarray:
    return (np.arange(n) + 0.5) * series["bin_s"]


def _plot_compete(ax: Any, r: dict[str, Any]) -> None:
    s = r["series"]
    ax.plot(_times(s, len(s["tcp_gbps"])), s["tcp_gbps"], label=f"TCP {r['tcp']}", color="tab:blue")
    ax.plot(
        _times(s, len(s["sdr_gbps"])),
        s["sdr_gbps"],
        label=f"SDR {r['controller']}",
        color="tab:red",
    )
    ax.axvspan(*r["window_s"], color="0.9", zorder=0)
    ax.set_ylim(0, None)
    ax.set_ylabel("Gbit/s")
    ax.set_xlabel("s")
    share = r["share_vs_fair"]
    ax.set_title(
        f"{r['tcp']} vs {r['controller']}, {r['buffer_bdp']:g} BDP: share {share:.2f}"
        if share is not None
        else r["label"],
        fontsize=9,
    )
    q = ax.twinx()
    qs = [np.nan if v is None else v for v in s["queue_ms"]]
    q.plot(_times(s, len(qs)), qs, color="0.4", lw=0.8, ls=":", label="queue ms")
    q.set_ylabel("queue ms", fontsize=8)
    if r.get("buffer_ms"):
        q.set_ylim(0, 1.6 * r["buffer_ms"])  # a full buffer drains in buffer_ms
    lines = ax.get_legend_handles_labels()[0] + q.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], fontsize=7, loc="upper right")


def _plot_pair(ax: Any, r: dict[str, Any]) -> None:
    s = r["series"]
    for i, g in enumerate(s["gbps"]):
        ax.plot(_times(s, len(g)), g, label=f"SDR {r['controller']} #{i + 1}")
    ax.axvspan(*r["window_s"], color="0.9", zorder=0)
    ax.set_ylim(0, None)
    ax.set_xlabel("s")
    ax.set_ylabel("Gbit/s")
    jain_text = f"Jain {r['jain']:.3f}" if r["jain"] is not None else "no overlap"
    ax.set_title(f"two SDR flows, {r['controller']}: {jain_text}", fontsize=9)
    ax.legend(fontsize=7)


def _plot_loss(ax: Any, rows: list[dict[str, Any]]) -> None:
    import matplotlib.ticker

    losses = sorted({r["loss"] for r in rows})
    names = list(dict.fromkeys(r["controller"] for r in rows))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        heights = []
        for loss in losses:
            found = [r for r in rows if r["loss"] == loss and r["controller"] == name]
            heights.append(found[0]["median_s"] if found and found[0]["median_s"] else np.nan)
        xs = np.arange(len(losses)) + i * width
        ax.bar(xs, heights, width, label=name)
        for x, h in zip(xs, heights, strict=True):
            if np.isnan(h):  # every run failed: say so where the bar would be
                ax.text(x, 0.02, "fail", rotation=90, ha="center", va="bottom", fontsize=7,
                        transform=ax.get_xaxis_transform())  # fmt: skip
    ax.set_xticks(
        np.arange(len(losses)) + width * (len(names) - 1) / 2, [f"loss {x:g}" for x in losses]
    )
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel("completion s (tcp: implied)")
    ax.set_title("alone at random loss", fontsize=9)
    ax.legend(fontsize=7)
