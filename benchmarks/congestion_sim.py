"""Congestion control and multipath in the shared-bottleneck simulator (issue 21).

Every SDR flow is driven by the real controller objects of :mod:`sdr.congestion`; the
TCP flows are Reno/CUBIC window models (:mod:`sdr.simulator.bottleneck_flows`). Five
measurements, each stated met or missed against the issue's target:

  a  two SDR flows, one 1 Gbit/s 25 ms bottleneck (1 BDP buffer), the second joining at
     1 s: RTTs until Jain's index >= 0.95 (held for 10 RTTs); target <= 20 RTTs
  b  one SDR flow joining one Reno or CUBIC flow: SDR's share / fair share over the last
     6 s; target 0.5..2; and the queueing delay, against the TCP flow alone
  c  SDR alone, 64 MiB at random loss 1e-3 and 1e-2: completion against `fixed` at the
     bottleneck rate; target <= 1.05x; CUBIC for contrast
  d  capacity 5 -> 1 Gbit/s at 1 s: drops, RTTs until the rate holds within 0.7..1.3x of
     the new capacity for 10 RTTs; target <= 10 RTTs, no loss storm
  e  four 1 Gbit/s paths, one with 1e-2 loss or twice the delay: RTTs until the selector
     moves off it, completion of 256 MiB against the ideal over the three good paths;
     target <= 1.2x

    python -m benchmarks.congestion_sim                    # tables, JSON, plots
    python -m benchmarks.congestion_sim --only a,c --no-plots

Times are simulated (independent of this machine); the JSON has the parameters.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sdr.congestion import PathSelector, controller_for
from sdr.simulator.bottleneck import Bottleneck, PathSpec, jain
from sdr.simulator.bottleneck_flows import SdrFlow, TcpFlow

ROOT = Path(__file__).resolve().parents[1]
GBIT = 1e9
RTT = 0.025
BDP = int(GBIT * RTT / 8)  # bytes at 1 Gbit/s
MIB = 1 << 20


def _sdr(name: str, rate: float, seed: int = 0, **kw: Any) -> SdrFlow:
    params = {"seed": seed} if name == "bbr" else {}
    return SdrFlow(controller_for(name, rate, **params), label=f"sdr-{name}", **kw)


def _held(ok: np.ndarray, hold: int) -> int | None:
    """First index from which ``ok`` is true for ``hold`` bins in a row (None: never)."""
    for i in range(len(ok) - hold + 1):
        if ok[i : i + hold].all():
            return i
    return None


def run_fairness(seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, traces = [], {}
    for name in ("fixed", "delay", "bbr"):
        engine = Bottleneck([PathSpec(rate=GBIT, rtt=RTT, buffer=BDP)], seed=seed)
        engine.add(_sdr(name, GBIT, seed=1))
        engine.add(_sdr(name, GBIT, seed=2, start=1.0))
        result = engine.run(3.0)
        a, b = result.throughput(0, RTT), result.throughput(1, RTT)
        start = int(round(1.0 / RTT))
        j = np.array([jain([x, y]) for x, y in zip(a[start:], b[start:], strict=True)])
        reached = _held(j >= 0.95, 10)
        util = (a[start + 20 :] + b[start + 20 :]).mean() / GBIT
        traces[name] = j.tolist()
        rows.append(
            {
                "controller": name,
                "rtts_to_jain_0.95": reached,
                "mean_jain_after_20_rtts": float(j[20:].mean()),
                "utilization": float(util),
                "drops": result.drops[0],
                "met": reached is not None and reached <= 20,
            }
        )
    return rows, traces


def run_tcp(seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, traces = [], {}
    for buffer in (1.0, 0.25):
        spec = PathSpec(rate=GBIT, rtt=RTT, buffer=int(BDP * buffer))
        for tcp in ("reno", "cubic"):
            alone = Bottleneck([spec], seed=seed)
            alone.add(TcpFlow(tcp))
            base = alone.run(8.0)
            q_alone = base.queue_delay[0][base.queue_t[0] > 2.0]
            for name in ("delay", "bbr"):
                engine = Bottleneck([spec], seed=seed)
                engine.add(TcpFlow(tcp))
                engine.add(_sdr(name, GBIT, start=1.0))
                result = engine.run(8.0)
                t, s = result.throughput(0, 0.5), result.throughput(1, 0.5)
                share = 2 * s[4:].sum() / (s[4:].sum() + t[4:].sum())
                q = result.queue_delay[0][result.queue_t[0] > 2.0]
                traces[f"{name}-{tcp}-{buffer}"] = {"tcp": t.tolist(), "sdr": s.tolist()}
                rows.append(
                    {
                        "sdr": name,
                        "tcp": tcp,
                        "buffer_bdp": buffer,
                        "share_vs_fair": float(share),
                        "queue_p50_ms": float(np.median(q) * 1e3),
                        "queue_p95_ms": float(np.percentile(q, 95) * 1e3),
                        "tcp_alone_queue_p50_ms": float(np.median(q_alone) * 1e3),
                        "met": bool(0.5 <= share <= 2.0),
                    }
                )
    return rows, traces


def run_random_loss(seed: int, size: int) -> list[dict[str, Any]]:
    rows = []
    for loss in (1e-3, 1e-2):
        spec = PathSpec(rate=GBIT, rtt=RTT, buffer=BDP, loss=loss)
        done: dict[str, float] = {}
        for label, make in (
            ("fixed", lambda: _sdr("fixed", GBIT, size=size)),
            ("delay", lambda: _sdr("delay", GBIT, size=size)),
            ("bbr", lambda: _sdr("bbr", GBIT, size=size)),
            ("delay, rate set 2x", lambda: _sdr("delay", 2 * GBIT, size=size)),
            ("bbr, rate set 2x", lambda: _sdr("bbr", 2 * GBIT, size=size)),
            ("cubic", lambda: TcpFlow("cubic", size=size)),
        ):
            engine = Bottleneck([spec], seed=seed)
            flow = make()
            engine.add(flow)
            engine.run(120.0)
            done[label] = flow.finished if flow.finished is not None else float("inf")
            ratio = done[label] / done["fixed"]
            rows.append(
                {
                    "loss": loss,
                    "flow": label,
                    "completion_s": done[label],
                    "vs_fixed": ratio,
                    "losses": flow.losses,
                    "met": None if label in ("fixed", "cubic") else ratio <= 1.05,
                }
            )
    return rows


def run_step(seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, traces = [], {}
    new = GBIT
    for name in ("fixed", "delay", "bbr"):
        spec = PathSpec(rate=5 * GBIT, rtt=RTT, buffer=int(new * 0.05 / 8), steps=((1.0, new),))
        engine = Bottleneck([spec], seed=seed)
        flow = _sdr(name, 5 * GBIT, mtu=8192)
        engine.add(flow)
        result = engine.run(2.0)
        rt, rv = np.asarray(flow.rate_t), np.asarray(flow.rate_v)
        bins = np.arange(1.0, 2.0, RTT)
        rate = np.array([rv[(rt >= b) & (rt < b + RTT)].mean() for b in bins])
        ok = (rate >= 0.7 * new) & (rate <= 1.3 * new)
        converged = _held(ok, 10)
        lost_after = flow.losses
        late = int((result.drop_t[0] > 1.0 + 3 * RTT).sum())
        q = result.queue_delay[0]
        traces[name] = {"t": (bins - 1.0).tolist(), "rate": rate.tolist()}
        rows.append(
            {
                "controller": name,
                "rtts_to_converge": converged,
                "drops": lost_after,
                "drops_in_bdps": lost_after * 8192 / (new * RTT / 8),
                "drops_after_3_rtts": late,
                "queue_max_ms": float(q.max() * 1e3),
                "met": converged is not None and converged <= 10 and late == 0,
            }
        )
    return rows, traces


def run_multipath(seed: int, size: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, traces = [], {}
    ideal = size * 8 / (3 * GBIT) + RTT
    for bad in ("loss 1e-2", "2x delay"):
        paths = [
            PathSpec(
                rate=GBIT,
                rtt=2 * RTT if bad == "2x delay" and i == 3 else RTT,
                buffer=BDP,
                loss=1e-2 if bad == "loss 1e-2" and i == 3 else 0.0,
            )
            for i in range(4)
        ]
        for name in ("delay", "bbr"):
            engine = Bottleneck(paths, seed=seed)
            selector = PathSelector(4)
            flow = SdrFlow(
                controller_for(name, 4 * GBIT), paths=range(4), selector=selector, size=size
            )
            engine.add(flow)
            engine.run(30.0)
            off = [t for t, p, active in selector.moves if p == 3 and not active]
            wrong = [p for t, p, active in selector.moves if p != 3 and not active]
            finished = flow.finished if flow.finished is not None else float("inf")
            traces[f"{name}-{bad}"] = {
                "t": [t for t, _ in flow.path_log],
                "w3": [w[3] for _, w in flow.path_log],
            }
            rows.append(
                {
                    "bad_path": bad,
                    "controller": name,
                    "rtts_to_move_off": off[0] / RTT if off else None,
                    "good_paths_moved_off": len(wrong),
                    "share_on_bad_path": flow.path_bytes[3] / sum(flow.path_bytes),
                    "completion_s": finished,
                    "vs_ideal_3_paths": finished / ideal,
                    "met": bool(off) and finished / ideal <= 1.2,
                }
            )
    return rows, traces


def _table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    if not rows:
        return
    keys = list(rows[0])
    cells = [[_fmt(r[k]) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print("  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True)))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "met" if v else "MISSED"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}"
    return str(v)


def _plots(traces: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    out.mkdir(parents=True, exist_ok=True)
    if "a" in traces:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for name, j in traces["a"].items():
            ax.plot(np.arange(len(j)), j, label=name)
        ax.axhline(0.95, color="grey", ls=":")
        ax.axvline(20, color="grey", ls=":")
        ax.set(xlabel="RTTs after the second flow joins", ylabel="Jain index", ylim=(0.45, 1.02))
        ax.set_title("Two SDR flows, 1 Gbit/s, 25 ms, 1 BDP buffer")
        ax.legend()
        written.append(_save(fig, out / "congestion_fairness.png"))
    if "b" in traces:
        fig, axes = plt.subplots(2, 2, figsize=(9, 5), sharex=True, sharey=True)
        for ax, key in zip(axes.flat, [k for k in traces["b"] if k.endswith("-1.0")], strict=False):
            tr = traces["b"][key]
            t = np.arange(len(tr["tcp"])) * 0.5
            ax.plot(t, np.asarray(tr["tcp"]) / 1e6, label="tcp")
            ax.plot(t, np.asarray(tr["sdr"]) / 1e6, label="sdr")
            ax.set_title(key.removesuffix("-1.0").replace("-", " vs "), fontsize=9)
        axes[1, 0].set(xlabel="s", ylabel="Mbit/s")
        axes[0, 0].legend()
        fig.suptitle("SDR joining one TCP flow at 1 s (1 BDP buffer)")
        written.append(_save(fig, out / "congestion_tcp.png"))
    if "d" in traces:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for name, tr in traces["d"].items():
            ax.plot(np.asarray(tr["t"]) / RTT, np.asarray(tr["rate"]) / 1e9, label=name)
        ax.axhline(1.0, color="grey", ls=":")
        ax.set(xlabel="RTTs after 5 -> 1 Gbit/s", ylabel="sending rate, Gbit/s", ylim=(0, 5.5))
        ax.legend()
        written.append(_save(fig, out / "congestion_step.png"))
    if "e" in traces:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for key, tr in traces["e"].items():
            ax.plot(np.asarray(tr["t"]) / RTT, tr["w3"], label=key)
        ax.set(xlabel="RTTs", ylabel="weight of the bad path", xlim=(0, 60))
        ax.legend(fontsize=8)
        written.append(_save(fig, out / "congestion_multipath.png"))
    return written


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="a,b,c,d,e", help="comma-separated measurements")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="out/congestion_sim.json")
    p.add_argument(
        "--figures", default="out", help="where the figures go (docs/figures: the committed ones)"
    )
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args()
    only = set(args.only.split(","))
    results: dict[str, Any] = {}
    traces: dict[str, Any] = {}
    started = time.perf_counter()
    if "a" in only:
        results["a"], traces["a"] = run_fairness(args.seed)
        _table("a) two SDR flows, 1 Gbit/s 25 ms: Jain >= 0.95 within 20 RTTs", results["a"])
    if "b" in only:
        results["b"], traces["b"] = run_tcp(args.seed)
        _table("b) SDR vs one TCP flow: share / fair in 0.5..2", results["b"])
    if "c" in only:
        results["c"] = run_random_loss(args.seed, 64 * MIB)
        _table("c) 64 MiB alone at random loss: <= 1.05x fixed", results["c"])
    if "d" in only:
        results["d"], traces["d"] = run_step(args.seed)
        _table("d) 5 -> 1 Gbit/s at 1 s: converged within 10 RTTs", results["d"])
    if "e" in only:
        results["e"], traces["e"] = run_multipath(args.seed, 256 * MIB)
        _table("e) four paths, one bad: <= 1.2x ideal over the good ones", results["e"])
    figures = [] if args.no_plots else _plots(traces, Path(args.figures))
    doc = {
        "command": " ".join(["python -m benchmarks.congestion_sim", *sys.argv[1:]]),
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0]},
        "parameters": {"seed": args.seed, "rate_bps": GBIT, "rtt_s": RTT, "buffer_bytes": BDP},
        "wall_s": time.perf_counter() - started,
        "results": results,
        "figures": figures,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))
    print(f"\nwall {doc['wall_s']:.1f} s; figures: {', '.join(figures) or 'none'}")


if __name__ == "__main__":
    main()
