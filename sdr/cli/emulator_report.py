"""What the emulator did on a run, as a table: drops by cause, duplicates, corruption,
reordering, late packets and the largest lateness against the set delay (the forwarder's
report, the same keys for the native and the Python forwarder). ``sdr emulate``,
``sdr demo`` and the WAN benchmarks print it beside their results, so a gap to the model
can be blamed on the right party."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

__all__ = [
    "LATE_FRACTION",
    "late_run",
    "lateness",
    "print_report",
    "report_table",
    "run_drops",
]

LATE_FRACTION = 0.02
"""A run is flagged when its emulator delivered a packet later than this fraction of the
run's time after it was due: late delivery holds every packet queued behind it, so the
largest lateness bounds what the host (not the link) could have added to the time."""

_REPORT_ROWS = (
    ("packets offered", "packets"),
    ("copies delivered", "delivered"),
    ("dropped: random loss", "drops_random_loss"),
    ("dropped: burst loss", "drops_burst_loss"),
    ("dropped: queue full", "drops_queue"),
    ("dropped: blackout", "drops_blackout"),
    ("corrupted (one bit)", "corrupted"),
    ("duplicated", "duplicated"),
    ("reordered", "reordered"),
    ("late (> 1 ms after due)", "late_packets"),
)


def report_table(summary: dict[str, object]) -> Table | None:
    """What the emulator did (the forwarder's report), one column per direction; None
    when the forwarder sent none."""
    report = summary.get("report")
    if not isinstance(report, dict) or not report:
        return None
    table = Table(title=f"what the emulator did ({summary.get('forwarder', '?')} forwarder)")
    table.add_column("")
    for name in report:
        table.add_column(name.replace("_", " "), justify="right")
    for label, key in _REPORT_ROWS:
        table.add_row(label, *(str(d[key]) for d in report.values()))
    table.add_row("max lateness", *(f"{d['max_lateness_s'] * 1e3:.3f} ms" for d in report.values()))
    table.add_row("set delay", *(f"{d['set_delay_s'] * 1e3:.3f} ms" for d in report.values()))
    return table


def print_report(summary: dict[str, object], console: Console | None = None) -> None:
    """Print :func:`report_table` (or say that there is no report)."""
    console = console or Console()
    table = report_table(summary)
    if table is None:
        console.print("[yellow]the forwarder sent no report[/]")
    else:
        console.print(table)


def lateness(summary: dict[str, object]) -> tuple[float, int]:
    """The largest lateness (s) over both directions and the packets delivered more than
    1 ms after they were due (0, 0 when the forwarder sent no report)."""
    report = summary.get("report")
    if not isinstance(report, dict) or not report:
        return 0.0, 0
    return (
        max(float(d["max_lateness_s"]) for d in report.values()),
        sum(int(d["late_packets"]) for d in report.values()),
    )


def late_run(summary: dict[str, object], completion_s: float) -> bool:
    """Whether a run's time is the host's as much as the link's: its emulator delivered a
    packet later than :data:`LATE_FRACTION` of ``completion_s`` after it was due."""
    return lateness(summary)[0] > LATE_FRACTION * completion_s


def run_drops(summary: dict[str, object]) -> int:
    """Packets the link's loss process dropped, both directions."""
    drops = 0
    for side in ("a_to_b", "b_to_a"):
        if side not in summary:
            continue
        counters = summary[side]
        if not isinstance(counters, dict):
            raise TypeError(f"summary[{side!r}] must be a dict of counters, got {counters!r}")
        drops += int(counters["loss_drops"])
    return drops
