"""Sweep: controller x random loss x buffer x competing traffic in the shared bottleneck.

One SDR flow (the real ``sdr.congestion`` controller) on a 1 Gbit/s, 25 ms bottleneck,
alone or joining one TCP flow (Reno or CUBIC window model) at 1 s; measured over 2 s to
the end. Per point: SDR's goodput, its share of the fair rate (with a competitor), the
competitor's goodput with SDR and alone (at random loss TCP cannot fill the link by
itself: max-min fairness then leaves SDR the rest, so SDR's rate is read against
``max(half the link, link - TCP alone)``), the queueing delay (p50/p95) and the drops.
The heatmaps show where each controller holds its own and where it starves or floods.

    python -m benchmarks.congestion_sweep                 # ~2-4 min on 2 cores
    python -m benchmarks.congestion_sweep --quick         # 2 x 2 x 2 x 2 points

Times are simulated; the JSON (``--json``) has every point and the parameters.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import track

from sdr.congestion import controller_for
from sdr.simulator.bottleneck import Bottleneck, PathSpec
from sdr.simulator.bottleneck_flows import SdrFlow, TcpFlow

ROOT = Path(__file__).resolve().parents[1]
GBIT = 1e9
RTT = 0.025
BDP = int(GBIT * RTT / 8)

CONTROLLERS = ("fixed", "delay", "bbr")
LOSSES = (0.0, 1e-3, 1e-2)
BUFFERS = (0.25, 1.0, 4.0)  # in BDPs
COMPETITORS = ("none", "reno", "cubic")


def run_point(
    controller: str, loss: float, buffer: float, competitor: str, seed: int, until: float
) -> dict[str, Any]:
    """One scenario; shares and delays over [2 s, until)."""
    spec = PathSpec(rate=GBIT, rtt=RTT, buffer=int(BDP * buffer), loss=loss)
    engine = Bottleneck([spec], seed=seed)
    if competitor != "none":
        engine.add(TcpFlow(competitor))
    params = {"seed": seed} if controller == "bbr" else {}
    start = 1.0 if competitor != "none" else 0.0
    engine.add(SdrFlow(controller_for(controller, GBIT, **params), start=start))
    result = engine.run(until)
    bins = result.throughput(len(engine.flows) - 1, 0.5)[4:]  # from 2 s
    sdr = float(bins.mean())
    other = float(result.throughput(0, 0.5)[4:].mean()) if competitor != "none" else 0.0
    alone = _tcp_alone(competitor, spec, seed, until) if competitor != "none" else 0.0
    # max-min fair: TCP limited by random loss below half the link leaves SDR the rest
    fair = max(GBIT / 2, GBIT - alone)
    q = result.queue_delay[0][result.queue_t[0] > 2.0]
    return {
        "controller": controller,
        "loss": loss,
        "buffer_bdp": buffer,
        "competitor": competitor,
        "sdr_mbps": sdr / 1e6,
        "competitor_mbps": other / 1e6,
        "share_vs_fair": 2 * sdr / (sdr + other) if competitor != "none" else None,
        "competitor_alone_mbps": alone / 1e6,
        "competitor_kept": other / alone if alone else None,
        "share_vs_maxmin": sdr / fair if competitor != "none" else None,
        "utilization": (sdr + other) / GBIT,
        "queue_p50_ms": float(np.median(q) * 1e3) if len(q) else 0.0,
        "queue_p95_ms": float(np.percentile(q, 95) * 1e3) if len(q) else 0.0,
        "drops": int(result.drops[0]),
    }


def _tcp_alone(kind: str, spec: PathSpec, seed: int, until: float) -> float:
    """The competitor's goodput from 2 s with the link to itself (bits/s)."""
    engine = Bottleneck([spec], seed=seed)
    engine.add(TcpFlow(kind))
    return float(engine.run(until).throughput(0, 0.5)[4:].mean())


def sweep(grid: dict[str, tuple], seed: int, until: float) -> list[dict[str, Any]]:
    points = list(itertools.product(*grid.values()))
    return [run_point(*p, seed=seed, until=until) for p in track(points, "simulating")]


def plot(rows: list[dict[str, Any]], grid: dict[str, tuple], path: Path) -> str:
    """One heatmap per competitor: rows controller x buffer, columns loss. Alone: the
    colour is the utilization, the text SDR's Mbit/s. With a competitor: the colour is
    how far SDR's rate is from its max-min fair rate (half the link, or what the TCP flow
    alone leaves when random loss holds it below half; |log2|: green fair, red 2x or
    more off), the text that ratio and the share of its lone rate the TCP flow kept."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comps = grid["competitor"]
    fig, axes = plt.subplots(1, len(comps), figsize=(4.2 * len(comps), 4.6), squeeze=False)
    labels = [f"{c}, {b:g} BDP" for c in grid["controller"] for b in grid["buffer_bdp"]]
    for ax, comp in zip(axes[0], comps, strict=True):
        value = np.zeros((len(labels), len(grid["loss"])))
        text = np.empty(value.shape, dtype=object)
        for r in rows:
            if r["competitor"] != comp:
                continue
            i = labels.index(f"{r['controller']}, {r['buffer_bdp']:g} BDP")
            j = grid["loss"].index(r["loss"])
            if comp == "none":
                value[i, j] = r["utilization"]
                text[i, j] = f"{r['sdr_mbps']:.0f}"
            else:  # distance from max-min fair on a log scale: 0 fair, 1 a factor 2 off
                share = max(r["share_vs_maxmin"], 1e-3)
                value[i, j] = abs(np.log2(share))
                text[i, j] = f"{share:.2f}\n{r['competitor_kept']:.0%}"
        if comp == "none":
            im = ax.imshow(value, cmap="RdYlGn", vmin=0, vmax=1)
        else:
            im = ax.imshow(value, cmap="RdYlGn_r", vmin=0, vmax=1.5)
        for (i, j), t in np.ndenumerate(text):
            ax.text(j, i, t, ha="center", va="center", fontsize=7)
        ticks = ["0" if x == 0 else f"{x:.0e}".replace("e-0", "e-") for x in grid["loss"]]
        ax.set_xticks(range(len(grid["loss"])), ticks, fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xlabel("random loss")
        title = "alone: utilization" if comp == "none" else f"vs {comp}: SDR / max-min fair"
        ax.set_title(title, fontsize=9)
        bar = fig.colorbar(im, ax=ax, shrink=0.7)
        bar.set_label(
            "utilization" if comp == "none" else "|log2(SDR / fair)|: 1 = 2x off", fontsize=8
        )
    fig.suptitle("One SDR flow on 1 Gbit/s, 25 ms (simulated)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 values per axis, 4 s runs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="out/congestion_sweep.json")
    p.add_argument(
        "--plot",
        default="out/congestion_sweep.png",
        help="committed: docs/figures/congestion_sweep.png",
    )
    args = p.parse_args()
    grid: dict[str, tuple] = {
        "controller": CONTROLLERS,
        "loss": LOSSES,
        "buffer_bdp": BUFFERS,
        "competitor": COMPETITORS,
    }
    until = 6.0
    if args.quick:
        grid = {k: v[1:] if k == "controller" else v[:2] for k, v in grid.items()}
        until = 4.0
    started = time.perf_counter()
    rows = sweep(grid, args.seed, until)
    figure = plot(rows, grid, Path(args.plot)) if args.plot else None
    doc = {
        "command": " ".join(["python -m benchmarks.congestion_sweep", *sys.argv[1:]]),
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0]},
        "parameters": {"seed": args.seed, "rate_bps": GBIT, "rtt_s": RTT, "until_s": until},
        "grid": {k: list(v) for k, v in grid.items()},
        "wall_s": time.perf_counter() - started,
        "points": rows,
        "figure": figure,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    for r in rows:
        share = (
            ""
            if r["share_vs_maxmin"] is None
            else (
                f" vs max-min fair {r['share_vs_maxmin']:.2f}, TCP kept {r['competitor_kept']:.0%}"
            )
        )
        print(
            f"{r['controller']:6} loss {r['loss']:<6g} buffer {r['buffer_bdp']:<4g} "
            f"vs {r['competitor']:5}: {r['sdr_mbps']:6.0f} Mbit/s{share}, "
            f"queue p95 {r['queue_p95_ms']:5.1f} ms, drops {r['drops']}"
        )


if __name__ == "__main__":
    main()
