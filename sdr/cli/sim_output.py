"""How the simulator commands report: error exits, JSON, quantile cells, a DES status line."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from sdr.simulator.link import Link
from sdr.units import format_size, format_time

console = Console()
err_console = Console(stderr=True)


def fail(exc: Exception) -> typer.Exit:
    err_console.print(f"error: {exc}", style="red", markup=False, soft_wrap=True)
    return typer.Exit(2)


def jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(jsonable(obj), indent=2) + "\n")


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def quantile_cells(
    value: float | None, ci: Sequence[float | None] | None, n: int | None
) -> tuple[str, str]:
    """Table cells (value, CI) for one quantile, honest about intervals that are open.

    A sampled quantile whose interval has an open bound (too few samples beyond it) is
    shown as the bound the samples do give (``>= lo``), or ``n/a`` if they give none.
    """
    if value is None:
        return "n/a", ""
    if ci is None:
        return format_time(value), ""
    lo = ci[0] if finite(ci[0]) else None
    hi = ci[1] if finite(ci[1]) else None
    if lo is not None and hi is not None:
        return format_time(value), f"{format_time(lo)} .. {format_time(hi)}"
    note = f"too few samples: n={n}" if n is not None else "too few samples"
    if lo is not None:
        return f">= {format_time(lo)}", note
    if hi is not None:
        return f"<= {format_time(hi)}", note
    return "n/a", note


def relative_delta(value: float, best: float) -> str:
    """``+0.0048%``: how far ``value`` is above ``best``, relative to it."""
    if best <= 0:
        return f"+{format_time(value - best)}"
    return f"{100 * (value - best) / best:+.2g}%"


@contextmanager
def des_status(samples: int, size_bytes: int, link: Link, scheme: str) -> Iterator[None]:
    """Tell the user on stderr that a (slow) discrete-event simulation is running.

    A spinner with the elapsed time when stderr is a terminal (removed when done), else one
    line. stdout stays clean for the table or JSON.
    """
    chunks = math.ceil(size_bytes / link.chunk_size)
    text = f"{scheme}: simulating {samples} writes of {format_size(size_bytes)} x {chunks} chunks"
    if not err_console.is_terminal:
        err_console.print(
            text + " (discrete-event, the real protocol) ...",
            markup=False,
            soft_wrap=True,
            highlight=False,
        )
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=err_console, transient=True,
    ) as bar:  # fmt: skip
        bar.add_task(text, total=None)
        yield
