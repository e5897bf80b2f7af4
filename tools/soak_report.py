"""The soak's report: the numbers that matter from its samples, and a plot over time."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

__all__ = ["summarize", "plot"]


def summarize(result: dict[str, Any], warmup: float = 0.2) -> dict[str, Any]:
    """The numbers that matter: messages, verification, failures, RSS after warm-up."""
    out: dict[str, Any] = {}
    for role, samples in result["samples"].items():
        if not samples:
            continue
        t_end = samples[-1]["t"]
        after = [s for s in samples if s["t"] >= warmup * t_end] or samples
        rss = [s["rss"] for s in after]
        third = max(1, len(rss) // 3)
        out[role] = {
            "duration_s": t_end,
            "rss_start_mib": round(after[0]["rss"] / 2**20, 1),
            "rss_end_mib": round(samples[-1]["rss"] / 2**20, 1),
            "rss_max_mib": round(max(rss) / 2**20, 1),
            "rss_growth_after_warmup_mib": round((samples[-1]["rss"] - after[0]["rss"]) / 2**20, 1),
            # peak of the last third minus peak of the first third after warm-up: buffers
            # in flight come and go, a leak raises every peak
            "rss_peak_growth_mib": round((max(rss[-third:]) - max(rss[:third])) / 2**20, 1),
            **{
                k: samples[-1][k] for k in ("started", "completed", "failed", "verified", "corrupt")
            },
            "gbytes": round(samples[-1]["bytes"] / 1e9, 3),
            "errors": samples[-1]["errors"],
            "error_messages": samples[-1].get("error_messages", []),
        }
    return out


def plot(result: dict[str, Any], path: pathlib.Path) -> None:
    """Memory (RSS) and goodput of both sides over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, rate) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for role, samples in result["samples"].items():
        t = np.array([s["t"] for s in samples])
        mem.plot(t / 60, [s["rss"] / 2**20 for s in samples], label=role)
        keep = np.concatenate([[True], np.diff(t) >= 1.0])  # the final sample may come early
        t = t[keep]
        if len(t) > 1:
            b = np.array([s["bytes"] for s in samples], dtype=float)[keep]
            rate.plot(t[1:] / 60, np.diff(b) * 8 / np.diff(t) / 1e6, label=role)
    mem.set_ylabel("RSS (MiB)")
    rate.set_ylabel("verified goodput (Mbit/s)")
    rate.set_xlabel("minutes")
    for ax in (mem, rate):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("SDR soak over the emulated link (loss, bursts, reorder, dup, corrupt, blackouts)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
