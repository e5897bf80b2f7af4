"""The closing table and chart of ``sdr demo``: measured vs predicted vs lossless ideal."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec

__all__ = [
    "by_scheme",
    "lossless_at_receiver",
    "predict",
    "results_chart",
    "results_table",
    "spread",
]


def predict(link: Link, size: int, loss: float, config: dict[str, Any]) -> float:
    """The simulator's mean completion time for the concrete scheme a run used, at the
    receiver: the model's completion is the sender's (the last acknowledgement back, one
    RTT after the last chunk left), so half an RTT, the acknowledgement's way back, comes
    off to compare it with an emulated run's ``completion_s`` (the receiver's last byte)."""
    name = config["scheme"]
    rto = 1.0 + float(config.get("alpha", 2.0)) if name == "sr-rto" else None
    spec = SchemeSpec(name, rto_rtts=rto, k=int(config.get("k", 32)), m=int(config.get("m", 8)))
    at_sender = evaluate(
        link.with_chunk(int(config["chunk_size"])), size, loss, spec, drop_unit="packet"
    ).mean_s
    return at_sender - link.one_way_delay


def lossless_at_receiver(size: int, rate: float, rtt: float) -> float:
    """The lossless ideal at the receiver: the bytes at the line ``rate`` (bits/s) plus the
    one-way delay, half the ``rtt`` (the time an emulated run's ``completion_s`` is
    compared with)."""
    return size * 8 / rate + rtt / 2


def _label(row: dict[str, Any]) -> str:
    cfg = row["config"]
    name = row["requested"] if row["requested"] != "auto" else f"auto:{cfg['scheme']}"
    if cfg["scheme"].startswith("ec-"):
        name += f" {cfg['k']},{cfg['m']}"
    return name


def by_scheme(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The runs grouped by the scheme asked for, in the order first run."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["requested"], []).append(r)
    return groups


def spread(times: list[float]) -> tuple[float, float, float]:
    """(min, median, max) of the runs' times."""
    return min(times), float(statistics.median(times)), max(times)


def results_table(rows: list[dict[str, Any]], title: str) -> Table:
    """One row per scheme over its runs: time as median and range, the spread
    ((max - min) / median), ratios of the median; retx and parity are medians in chunks
    (the bytes on the wire are in the JSON);
    ! marks a scheme with runs the emulator delivered late (see ``LATE_FRACTION``)."""
    groups = by_scheme(rows)
    ideal = rows[0]["ideal_s"]
    table = Table(
        title=f"{title}; {max(len(g) for g in groups.values())} runs per scheme",
        caption=f"time: median s of the runs; range: min-max, spread: (max-min)/median; "
        f"model: simulator s; /ideal, /model: the median over the lossless ideal "
        f"({ideal:.2f} s) and the model; retx, parity: chunks (medians); late: runs flagged",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("scheme", no_wrap=True)
    for col in ("time", "range, spread", "model", "/ideal", "/model"):
        table.add_column(col, justify="right", no_wrap=True)
    for col in ("retx", "parity", "late"):
        table.add_column(col, justify="right", no_wrap=True)
    for runs in groups.values():
        lo, med, hi = spread([r["completion_s"] for r in runs])
        first = runs[0]
        late = sum(bool(r.get("late")) for r in runs)

        def median_of(get: Any, runs: list[dict[str, Any]] = runs) -> float:
            return float(statistics.median(get(r) for r in runs))

        table.add_row(
            _label(first),
            f"{med:.2f}",
            f"{lo:.2f}-{hi:.2f} {(hi - lo) / med:.0%}",
            f"{first['predicted_s']:.2f}",
            f"{med / first['ideal_s']:.2f}x",
            f"{med / first['predicted_s']:.2f}x",
            f"{median_of(lambda r: r['stats'].get('chunks_retransmitted', 0)):g}",
            f"{median_of(lambda r: r['stats'].get('chunks_sent_lane1', 0)):g}",
            f"{late}!" if late else "0",
        )
    return table


def results_chart(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Bars: the median measured time (the whiskers: min and max of the runs, late runs
    as red dots), the simulator's prediction and the lossless ideal, per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(by_scheme(rows).values())
    labels = [_label(runs[0]) for runs in groups]
    stats = [spread([r["completion_s"] for r in runs]) for runs in groups]
    xs = list(range(len(groups)))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.27
    meds = [m for _, m, _ in stats]
    err = [[m - lo for lo, m, _ in stats], [hi - m for _, m, hi in stats]]
    ax.bar([x - width for x in xs], meds, width, yerr=err, capsize=3, label="measured (median)")
    for x, runs in enumerate(groups):
        late = [r["completion_s"] for r in runs if r.get("late")]
        if late:
            ax.plot([x - width] * len(late), late, "o", color="red", ms=4)
    ax.bar(xs, [runs[0]["predicted_s"] for runs in groups], width, label="simulator")
    ax.bar(
        [x + width for x in xs],
        [runs[0]["ideal_s"] for runs in groups],
        width,
        label="lossless ideal",
    )
    ax.set_xticks(xs, labels, rotation=15)
    ax.set_ylabel("completion time (s)")
    runs_per = max(len(runs) for runs in groups)
    ax.set_title(
        f"{title}\n{runs_per} runs per scheme (whiskers: min-max; red: late runs)", fontsize=10
    )
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
