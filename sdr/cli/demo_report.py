"""The closing table and chart of ``sdr demo``: measured vs predicted vs lossless ideal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec

__all__ = ["lossless_at_receiver", "predict", "results_table", "results_chart"]


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
    return at_sender - link.rtt_s / 2


def lossless_at_receiver(size: int, rate_bps: float, rtt_s: float) -> float:
    """The lossless ideal at the receiver: the bytes at the line rate plus the one-way delay
    (the time an emulated run's ``completion_s`` is compared with)."""
    return size * 8 / rate_bps + rtt_s / 2


def _label(row: dict[str, Any]) -> str:
    cfg = row["config"]
    name = row["requested"] if row["requested"] != "auto" else f"auto:{cfg['scheme']}"
    if cfg["scheme"].startswith("ec-"):
        name += f" {cfg['k']},{cfg['m']}"
    return name


def results_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Times in seconds; retx and parity in chunks; /ideal and /pred are ratios."""
    table = Table(
        title=title,
        caption="time: measured s, model: simulator s; MiB put on the wire; retx, parity: chunks",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("scheme", no_wrap=True)
    for col in ("time", "model", "ideal", "t/ideal", "t/model", "MiB", "retx", "parity"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        stats = r["stats"]
        table.add_row(
            _label(r),
            f"{r['completion_s']:.2f}",
            f"{r['predicted_s']:.2f}",
            f"{r['ideal_s']:.2f}",
            f"{r['completion_s'] / r['ideal_s']:.2f}x",
            f"{r['completion_s'] / r['predicted_s']:.2f}x",
            f"{r['wire_bytes'] / 2**20:.1f}",
            str(stats.get("chunks_retransmitted", 0)),
            str(stats.get("chunks_sent_lane1", 0)),
        )
    return table


def results_chart(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [_label(r) for r in rows]
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.27
    ax.bar([x - width for x in xs], [r["completion_s"] for r in rows], width, label="measured")
    ax.bar(list(xs), [r["predicted_s"] for r in rows], width, label="simulator")
    ax.bar([x + width for x in xs], [r["ideal_s"] for r in rows], width, label="lossless ideal")
    ax.set_xticks(list(xs), labels, rotation=15)
    ax.set_ylabel("completion time (s)")
    ax.set_title(title, fontsize=10)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
