"""SDR multipath across several emulated paths, one of them bad (issue 21's last target).

Every run gets a fresh :class:`~sdr.backends.wan.multipath_link.MultiPathTunLink`:
``--paths`` paths of ``--path-rate`` and ``--rtt`` each (a drop-tail buffer of one BDP),
the last one bad (``--bad``): ``loss`` (random loss ``--loss``), ``delay`` (twice the
RTT) or ``none`` (all good, the baseline). The real ``sdr recv --data-port`` in B and
``sdr send --paths N --congestion C`` in A (``--rate`` the sum of the paths' rates, so a
controller has to find that the bad path is worth less); UDP to B's port ``P + i``
takes path ``i``, the way an ECMP switch hashes distinct source/destination ports.

Per run: completion (receiver side, first write to last verified byte) against the
ideal over the good paths (``size / ((N - 1) x path rate) + RTT``; over all N with
``none``): target <= 1.2x; when the sender's path selector first moved off the bad
path, in RTTs since the first write: target "within a few RTTs" (read as <= 10); good
paths it moved off; the share of bytes it sent on the bad path; what each emulated path
did (packets, drops by cause, lateness). Needs root (namespaces, TUN).

    python -m benchmarks.multipath_emulated --json docs/results/multipath_emulated.json \\
        --plot docs/figures/multipath_emulated.png
    python -m benchmarks.multipath_emulated --bad loss --controllers delay --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

from sdr.errors import SDRError
from sdr.units import parse_rate, parse_size, parse_time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BADS = ("loss", "delay", "none")
BASE_PORT = 19400
MOVE_TARGET_RTTS = 10.0
IDEAL_TARGET = 1.2


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paths", type=int, default=4, help="emulated paths")
    p.add_argument("--path-rate", default="150Mbit/s", help="rate of each path")
    p.add_argument("--rtt", default="25ms", help="round-trip time of a good path")
    p.add_argument("--bad", default="loss,delay,none", help="what is wrong with the last path")
    p.add_argument("--loss", type=float, default=1e-2, help="the lossy path's random loss")
    p.add_argument("--controllers", default="delay,bbr", help="SDR congestion controllers")
    p.add_argument("--scheme", default="sr-nack", help="SDR reliability scheme")
    p.add_argument("--size", default="64MiB", help="bytes per transfer")
    p.add_argument("--repeats", type=int, default=2, help="runs per setting")
    p.add_argument("--timeout", type=float, default=120.0, help="s before a transfer fails")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a figure here (PNG)")
    args = p.parse_args(argv)
    args.bads = [b.strip() for b in args.bad.split(",") if b.strip()]
    unknown = sorted(set(args.bads) - set(BADS))
    if unknown:
        p.error(f"--bad: unknown {unknown}; choose from {', '.join(BADS)}")
    if not 2 <= args.paths <= 16:
        p.error(f"--paths must be in [2, 16], got {args.paths}")
    if not 0 < args.loss < 1:
        p.error(f"--loss must be in (0, 1), got {args.loss}")
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    try:
        args.rate_bps = parse_rate(args.path_rate, field="--path-rate")
        args.rtt_s = parse_time(args.rtt, field="--rtt")
        args.size_bytes = parse_size(args.size, field="--size")
    except SDRError as exc:
        p.error(str(exc))
    args.controller_list = [c.strip() for c in args.controllers.split(",") if c.strip()]
    return args


def _specs(args: argparse.Namespace, bad: str) -> list[Any]:
    from sdr.backends.wan import LinkSpec

    good = LinkSpec(rate=args.rate_bps, rtt=args.rtt_s)
    worse = {
        "loss": LinkSpec(rate=args.rate_bps, rtt=args.rtt_s, loss=args.loss, seed=5),
        "delay": LinkSpec(rate=args.rate_bps, rtt=2 * args.rtt_s),
        "none": good,
    }[bad]
    return [good] * (args.paths - 1) + [worse]


def run_one(args: argparse.Namespace, bad: str, controller: str, source: pathlib.Path) -> dict:
    """One transfer across a fresh multipath link; the row of the table."""
    from sdr.backends.wan.multipath_link import MultiPathTunLink
    from sdr.cli.wan_transfer import transfer_over_link

    n, rtt = args.paths, args.rtt_s
    ports = list(range(BASE_PORT, BASE_PORT + n))
    good_paths = n if bad == "none" else n - 1
    ideal = args.size_bytes * 8 / (good_paths * args.rate_bps) + rtt
    row: dict[str, Any] = {"bad": bad, "controller": controller, "ideal_s": ideal}
    send = ["--paths", str(n), "--rate", f"{n * args.rate_bps / 1e6:g}Mbit/s", "--rtt", args.rtt,
            "--scheme", args.scheme, "--congestion", controller,
            "--message-size", "4MiB"]  # fmt: skip
    link = MultiPathTunLink(_specs(args, bad), ports=ports)
    try:
        with link, tempfile.TemporaryDirectory() as tmp:
            report = transfer_over_link(
                link, source, pathlib.Path(tmp) / "out.bin", send, timeout=args.timeout,
                recv_args=["--data-port", str(ports[0])],
            )  # fmt: skip
    except SDRError as exc:
        return row | {"error": str(exc)[-400:], "met": False}
    paths = report["multipath"]["paths"]
    moves = report["multipath"]["moves"]
    off = [t for t, p, active in moves if p == n - 1 and not active]
    wrong = sorted({p for _, p, active in moves if p != n - 1 and not active})
    sent = [p["sent"] for p in paths]
    row |= {
        "completion_s": report["completion_s"],
        "vs_ideal": report["completion_s"] / ideal,
        "moved_off_rtts": off[0] / rtt if off else None,
        "good_paths_moved_off": wrong,
        "share_on_bad": sent[-1] / sum(sent),
        "retransmitted_chunks": report["stats"].get("chunks_retransmitted", 0),
        "sent_bytes": sent,
        "lost_bytes": [p["lost"] for p in paths],
        "moves": moves,
        "emulator": [s.get("report", {}).get("a_to_b", {}) for s in link.summaries],
    }
    moved_ok = bad == "none" or (bool(off) and off[0] / rtt <= MOVE_TARGET_RTTS)
    row["met"] = bool(moved_ok and not wrong and row["vs_ideal"] <= IDEAL_TARGET)
    return row


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _median_rows(rows: list[dict]) -> list[dict]:
    out = []
    keys = sorted(
        {(r["bad"], r["controller"]) for r in rows}, key=lambda k: (BADS.index(k[0]), k[1])
    )
    for bad, controller in keys:
        runs = [r for r in rows if r["bad"] == bad and r["controller"] == controller]
        done = [r for r in runs if "error" not in r]
        clean = [
            r["completion_s"]
            for r in rows
            if r["bad"] == "none" and r["controller"] == controller and "error" not in r
        ]
        mid, base = _median([r["completion_s"] for r in done]), _median(clean)
        moved = [r["moved_off_rtts"] for r in done if r["moved_off_rtts"] is not None]
        out.append(
            {
                "bad": bad,
                "controller": controller,
                "runs": len(runs),
                "failed": len(runs) - len(done),
                "completion_s": [round(r["completion_s"], 3) for r in done],
                "median_vs_ideal": _median([r["vs_ideal"] for r in done]),
                "median_vs_all_good": mid / base if mid is not None and base else None,
                "moved_off_rtts": [round(m, 1) for m in moved],
                "good_paths_moved_off": sum(len(r["good_paths_moved_off"]) for r in done),
                "share_on_bad": statistics.median(r["share_on_bad"] for r in done)
                if done
                else None,
                "met": f"{sum(r['met'] for r in runs)} of {len(runs)}",
            }
        )
    return out


def _print(summary: list[dict], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    title = (
        f"SDR ({args.scheme}) over {args.paths} emulated paths of {args.path_rate}, RTT "
        f"{args.rtt}, {args.size}; the last path bad"
    )
    table = Table(title=title, caption=(
        f"vs ideal: completion / (size over the good paths' rate + RTT), target <= "
        f"{IDEAL_TARGET}x; vs all good: median against the same controller's runs with no "
        f"bad path (what this host's CPU allows); moved off: RTTs from the first write, "
        f"target <= {MOVE_TARGET_RTTS:g}"
    ))  # fmt: skip
    for col in ("bad path", "cc", "completion s", "vs ideal (median)", "vs all good",
                "moved off, RTTs",
                "good paths moved off", "share on bad", "met"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in summary:
        bad = {"loss": f"loss {args.loss:g}", "delay": "2x RTT", "none": "none"}[r["bad"]]
        table.add_row(
            bad,
            r["controller"],
            " ".join(f"{c:.2f}" for c in r["completion_s"])
            + (f" ({r['failed']} failed)" if r["failed"] else ""),
            "-" if r["median_vs_ideal"] is None else f"{r['median_vs_ideal']:.2f}x",
            "-" if r["median_vs_all_good"] is None else f"{r['median_vs_all_good']:.2f}x",
            " ".join(f"{m:g}" for m in r["moved_off_rtts"])
            or ("-" if r["bad"] == "none" else "never"),
            str(r["good_paths_moved_off"]),
            "-" if r["share_on_bad"] is None else f"{r['share_on_bad']:.2f}",
            r["met"],
        )  # fmt: skip
    Console(width=150).print(table)


def _plot(rows: list[dict], args: argparse.Namespace, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt

    done = [r for r in rows if "error" not in r]
    done.sort(key=lambda r: (r["bad"], r["controller"], r.get("run", 1)))  # runs side by side
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5))
    names = {"loss": f"loss {args.loss:g}", "delay": "2x RTT", "none": "all good"}
    labels = [f"{names[r['bad']]}, {r['controller']} #{r.get('run', 1)}" for r in done]
    colours = {c: f"C{i}" for i, c in enumerate(dict.fromkeys(r["controller"] for r in done))}
    ax1.bar(range(len(done)), [r["vs_ideal"] for r in done],
            color=[colours[r["controller"]] for r in done])  # fmt: skip
    target = ax1.axhline(IDEAL_TARGET, color="tab:red", ls="--", label=f"target {IDEAL_TARGET}x")
    patches = [matplotlib.patches.Patch(color=c, label=n) for n, c in colours.items()]
    ax1.set_xticks(range(len(done)), labels, fontsize=7, rotation=60, ha="right")
    ax1.set_ylabel("completion / ideal over the good paths")
    ax1.legend(handles=[target, *patches], fontsize=7)
    bottom = [0.0] * len(done)
    for i in range(args.paths):
        share = [r["sent_bytes"][i] / sum(r["sent_bytes"]) for r in done]
        name = f"path {i}" + (" (bad)" if i == args.paths - 1 else "")
        ax2.bar(range(len(done)), share, bottom=bottom, label=name)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax2.set_xticks(range(len(done)), labels, fontsize=7, rotation=60, ha="right")
    ax2.set_ylabel("share of bytes sent")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"{args.paths} emulated paths of {args.path_rate}, RTT {args.rtt}, {args.size}")
    fig.tight_layout()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    from sdr.backends.wan import can_use_namespaces
    from sdr.cli.wan_transfer import make_payload

    reason = can_use_namespaces()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        source = make_payload(pathlib.Path(tmp) / "in.bin", args.size_bytes, seed=2)
        for repeat in range(args.repeats):
            for bad in args.bads:
                for controller in args.controller_list:
                    print(
                        f"{time.strftime('%H:%M:%S')} bad path {bad}: {controller} run "
                        f"{repeat + 1}/{args.repeats}",
                        flush=True,
                    )
                    row = run_one(args, bad, controller, source)
                    row["run"] = repeat + 1
                    if "error" in row:
                        print(f"  failed: {row['error']}", flush=True)
                    rows.append(row)
    summary = _median_rows(rows)
    _print(summary, args)
    if args.plot:
        _plot(rows, args, args.plot)
    if args.json:
        out = {
            "command": " ".join(
                ["python -m benchmarks.multipath_emulated", *(argv or sys.argv[1:])]
            ),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "wall_s": time.time() - started,
            "summary": summary,
            "runs": rows,
        }
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
