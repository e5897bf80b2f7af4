"""What ``benchmarks.congestion_emulated`` reports: the JSON document (meta, each
scenario's rows, what the emulator did on each link) and its tables."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import subprocess
import sys
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from benchmarks.congestion_emulated_parts.options import Options
from sdr.cli.emulator_report import print_report
from sdr.units import format_size

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def meta(opts: Options, load_before: tuple[float, float, float]) -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "command": " ".join(["python -m benchmarks.congestion_emulated", *opts.argv]),
        "commit": _commit(),
        "rate_bps": opts.rate,
        "rtt_s": opts.rtt,
        "bdp_bytes": opts.bdp,
        "queue_delay": "one-way delay of a 16-byte UDP probe A->B every 10 ms, above the "
        "idle link's smallest (measured 0.4 s before each compete run)",
        "share": "2 S / (S + T) over [SDR start + settle, SDR end]",
    }


def document(results: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: meta, the rows of each scenario, the emulator's reports."""
    return {"meta": info, **results}


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _q(stats: dict[str, float]) -> str:
    return f"{stats['p50']:.1f} / {stats['p95']:.1f}" if stats else "-"


def _verdict(met: bool | None) -> str:
    return "-" if met is None else ("[green]met[/]" if met else "[red]missed[/]")


def compete_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        caption="share = 2 SDR / (SDR + TCP) over the overlap; "
        "queue: one-way probe delay above idle, ms",
    )
    cols = (
        "TCP",
        "buffer",
        "SDR cc",
        "SDR s",
        "SDR Gbit/s",
        "TCP Gbit/s",
        "TCP alone",
        "share/fair",
        "target",
        "queue TCP alone p50/p95",
        "queue both p50/p95",
        "queue drops",
    )
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row("-", "-", r["label"], f"[red]error[/] {r['error'][:60]}", *["-"] * 8)
            continue
        done = _num(r["sdr_completion_s"]) if r["sdr_ok"] else "[red]fail[/]"
        table.add_row(
            r["tcp"], f"{r['buffer_bdp']:g} BDP", r["controller"], done, _num(r["sdr_gbps"]),
            _num(r["tcp_gbps"]), _num(r["tcp_alone_gbps"]), _num(r["share_vs_fair"], ".2f"),
            _verdict(r["share_met"]), _q(r["queue_ms"]["tcp_alone"]), _q(r["queue_ms"]["both"]),
            str(r.get("queue_drops", "-")),
        )  # fmt: skip
    return table


def loss_table(rows: list[dict[str, Any]], size: int) -> Table:
    table = Table(
        title=f"SDR alone at random loss, {format_size(size)} (median of the runs)",
        box=box.SIMPLE_HEAD,
        caption="tcp-cubic: iperf3 goodput, and the time the size would take at it",
    )
    for col in ("loss", "controller", "median s", "runs s", "vs fixed", "target <= 1.05x"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row("-", r["label"], f"[red]error[/] {r['error'][:60]}", "-", "-", "-")
            continue
        runs = " ".join("fail" if t is None else f"{t:.2f}" for t in r.get("runs_s", []))
        if r["controller"] == "tcp-cubic":
            runs = f"{r['tcp_gbps']:.3f} Gbit/s"
        table.add_row(
            f"{r['loss']:g}", r["controller"], _num(r.get("median_s")), runs,
            _num(r.get("vs_fixed"), ".2f") + ("x" if r.get("vs_fixed") else ""),
            _verdict(r.get("met")),
        )  # fmt: skip
    return table


def pair_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        title="two SDR flows at once",
        box=box.SIMPLE_HEAD,
        caption="Gbit/s over the overlap (from --settle s after the second began)",
    )
    for col in ("controller", "flow 1 s", "flow 2 s", "flow 1", "flow 2", "total", "Jain"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("target >= 0.95", justify="right", no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row(r["label"], f"[red]error[/] {r['error'][:60]}", *["-"] * 6)
            continue
        done = [
            "[red]fail[/]" if err else _num(s)
            for s, err in zip(r["completion_s"], r["errors"], strict=True)
        ]
        table.add_row(
            r["controller"], *done, _num(r["gbps"][0]), _num(r["gbps"][1]),
            _num(r["total_gbps"]), _num(r["jain"]), _verdict(r["met"]),
        )  # fmt: skip
    return table


def failures(doc: dict[str, Any]) -> list[str]:
    """One line per failed SDR transfer (run, then the sender's or receiver's error)."""
    lines = [f"{r['label']}: {r['sdr_error']}" for r in doc["compete"] if r.get("sdr_error")]
    for r in doc["loss"]:
        lines += [f"loss {r['loss']:g} {r['controller']}: {e}" for e in r.get("errors", [])]
    for r in doc["pair"]:
        lines += [f"{r['label']} flow {i + 1}: {e}" for i, e in enumerate(r.get("errors", [])) if e]
    return lines


def print_results(doc: dict[str, Any], opts: Options) -> None:
    console = Console(width=180)
    rate = f"{opts.rate / 1e9:g} Gbit/s, RTT {opts.rtt * 1e3:g} ms"
    if doc["compete"]:
        console.print(
            compete_table(
                doc["compete"], f"SDR ({opts.scheme}) against one kernel TCP flow, {rate}"
            )
        )
    if doc["loss"]:
        console.print(loss_table(doc["loss"], opts.loss_size))
    if doc["pair"]:
        console.print(pair_table(doc["pair"]))
    for line in failures(doc):
        console.print(f"[red]failed[/] {line}", markup=True, highlight=False)
    for link in doc["links"]:
        console.print(f"[bold]{link['run']}[/]:")
        print_report(link, console)


def write_json(doc: dict[str, Any], path: str) -> None:
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=1))
