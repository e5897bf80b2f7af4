"""The numbers of ``benchmarks.congestion_emulated``, pure: rates and shares from the
flows' cumulative byte counts, windows, percentiles and time bins, and each scenario's
row (compete, loss, pair) from its traces. Jain's index is the simulator's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sdr.simulator.bottleneck import jain

BIN_S = 0.25
"""Width of the time bins of the throughput and queue series (seconds)."""


Points = list[tuple[float, float]]
"""A cumulative byte count over time: (seconds, bytes so far), time ascending."""


def cumulative_at(points: Points, t: float) -> float:
    """Bytes done at ``t`` (linear between points; 0 before the first, the last after)."""
    if not points or t < points[0][0]:
        return 0.0
    return float(np.interp(t, [p[0] for p in points], [p[1] for p in points]))


def rate_between(points: Points, start: float, end: float) -> float:
    """Bits/s of the cumulative ``points`` over [start, end] (0 for an empty span)."""
    if end <= start:
        return 0.0
    return (cumulative_at(points, end) - cumulative_at(points, start)) * 8 / (end - start)


def share_vs_fair(flow_bps: float, other_bps: float) -> float | None:
    """A flow's share of two against the fair half: 2 S / (S + T) (1 = fair, 2 = all)."""
    total = flow_bps + other_bps
    return None if total <= 0 else 2 * flow_bps / total


def share_met(share: float | None, low: float = 0.5, high: float = 2.0) -> bool:
    """The compete target: SDR's share between ``low`` and ``high`` times fair.

    ``high`` = 2 is the largest share there is (the other flow starved); it counts as met
    only when the other flow kept something (share strictly below 2)."""
    return share is not None and low <= share < high


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 95)) -> dict[str, float]:
    """``{"p50": ..., "p95": ...}`` (empty when there are no values)."""
    if len(values) == 0:
        return {}
    return {f"p{q:g}": float(np.percentile(values, q)) for q in qs}


def window(start: float, end: float, settle: float, least: float = 0.5) -> tuple[float, float]:
    """The measured span: from ``settle`` s after ``start`` to ``end``, or the whole span
    when what is left would be shorter than ``least`` s."""
    if end - (start + settle) >= least:
        return start + settle, end
    return start, end


def binned_rate(points: Points, t_end: float, width: float = BIN_S) -> list[float]:
    """Gbit/s of ``points`` per bin [k w, (k+1) w) from 0 to ``t_end`` (4 decimals)."""
    edges = np.arange(0.0, t_end + width, width)
    spans = zip(edges[:-1], edges[1:], strict=True)
    return [round(rate_between(points, a, b) / 1e9, 4) for a, b in spans]


def binned_median(samples: Sequence[tuple[float, float]], t_end: float, width: float = BIN_S):
    """The median value per time bin of (t, value) samples, 2 decimals (None: empty bin)."""
    n = int(np.ceil(t_end / width)) + 1
    bins: list[list[float]] = [[] for _ in range(n)]
    for t, v in samples:
        if 0 <= t < n * width:
            bins[int(t // width)].append(v)
    return [round(float(np.median(b)), 2) if b else None for b in bins[: max(n - 1, 1)]]


def between(samples: Sequence[tuple[float, float]], start: float, end: float) -> list[float]:
    """Values of the (t, value) samples with ``start <= t < end``."""
    return [v for t, v in samples if start <= t < end]


def summarize_compete(
    *,
    tcp_points: Points,
    sdr_points: Points,
    sdr_span: tuple[float, float],
    tcp_start: float,
    queue: list[tuple[float, float]],
    t_end: float,
    settle: float,
) -> dict[str, Any]:
    """The compete numbers from the traces (times relative to the run's start)."""
    sdr_start, sdr_end = sdr_span
    a, b = window(sdr_start, sdr_end, settle)
    alone = window(tcp_start, sdr_start, settle)
    sdr_bps, tcp_bps = rate_between(sdr_points, a, b), rate_between(tcp_points, a, b)
    share = share_vs_fair(sdr_bps, tcp_bps)
    q_alone, q_both = between(queue, *alone), between(queue, a, b)
    return {
        "window_s": [a, b],
        "tcp_alone_window_s": list(alone),
        "sdr_completion_s": sdr_end - sdr_start,
        "sdr_gbps": sdr_bps / 1e9,
        "tcp_gbps": tcp_bps / 1e9,
        "tcp_alone_gbps": rate_between(tcp_points, *alone) / 1e9,
        "total_gbps": (sdr_bps + tcp_bps) / 1e9,
        "share_vs_fair": share,
        "share_met": share_met(share),
        "queue_ms": {"tcp_alone": percentiles(q_alone), "both": percentiles(q_both)},
        "series": {
            "bin_s": BIN_S,
            "sdr_gbps": binned_rate(sdr_points, t_end),
            "tcp_gbps": binned_rate(tcp_points, t_end),
            "queue_ms": binned_median(queue, t_end),
            "sdr_span_s": [sdr_start, sdr_end],
        },
    }


def summarize_loss(
    loss: float, spec_label: str, times: list[float | None], errors: list[str]
) -> dict[str, Any]:
    done = [t for t in times if t is not None]
    return {
        "scenario": "loss",
        "loss": loss,
        "controller": spec_label,
        "runs_s": times,
        "median_s": float(np.median(done)) if done else None,
        "failures": len(times) - len(done),
        "errors": errors[:3],
    }


def compare_to_fixed(rows: list[dict[str, Any]], limit: float = 1.05) -> None:
    """Add ``vs_fixed`` (median / fixed's median at the same loss) and ``met`` (<= limit
    for every non-fixed SDR row; ``delay`` is the one the target is about)."""
    fixed = {r["loss"]: r["median_s"] for r in rows if r["controller"] == "fixed"}
    for r in rows:
        base = fixed.get(r["loss"])
        ratio = r["median_s"] / base if base and r.get("median_s") else None
        r["vs_fixed"] = ratio
        if r["controller"] not in ("fixed", "tcp-cubic"):
            r["met"] = ratio is not None and ratio <= limit and r["failures"] == 0


def summarize_pair(
    points: list[Points], spans: list[tuple[float, float]], t_end: float, settle: float
) -> dict[str, Any]:
    """Two SDR flows: each one's throughput over the overlap and Jain's index."""
    start = max(s for s, _ in spans)
    end = min(e for _, e in spans)
    a, b = window(start, end, settle) if end > start else (start, start)
    rates = [rate_between(p, a, b) for p in points]
    return {
        "window_s": [a, b],
        "gbps": [r / 1e9 for r in rates],
        "jain": jain(rates) if any(rates) else None,
        "total_gbps": sum(rates) / 1e9,
        "series": {
            "bin_s": BIN_S,
            "gbps": [binned_rate(p, t_end) for p in points],
            "spans_s": [list(s) for s in spans],
        },
    }
