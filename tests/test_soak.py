"""The CI soak: ~50 s of reliable messages between two processes over the emulated link.

Same harness as the 30-minute run (tools/soak.py): loss (random and in bursts),
reordering, duplication, corruption that reaches SDR's own checks, and link blackouts
shorter than the global timeout. Every completed message must be byte-exact, none may
fail, and resident memory must not climb once warm (buffers in flight come and go, so
the check compares peaks with a tolerance of a few messages' worth).
"""

from __future__ import annotations

import pathlib
import sys

import pytest

from sdr.backends.wan import can_use_namespaces

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
import soak  # noqa: E402

pytestmark = pytest.mark.skipif(bool(can_use_namespaces()), reason=str(can_use_namespaces()))

RSS_TOLERANCE_MIB = 24


def test_soak_verifies_every_message_and_memory_stays_flat(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = soak.SoakConfig(duration=50.0, blackout_every=15.0, blackout_for=1.0, sample_every=2.0)
    result = soak.run_soak(cfg)
    soak.plot(result, tmp_path / "soak.png")
    summary = result["summary"]
    send, recv = summary["send"], summary["recv"]
    link = result["link"]
    # the link really did all of it
    a_to_b = link["a_to_b"]
    for cause in ("loss_drops", "blackout_drops", "duplicated", "reordered", "corrupted"):
        assert a_to_b[cause] > 0, (cause, a_to_b)
    counters = result["final"]["recv"]["counters"]
    assert counters["bad_icrc"] > 0  # corruption reached SDR's checks, and they caught it
    # every message
    assert recv["corrupt"] == 0
    assert send["failed"] == 0 and recv["failed"] == 0, (send["errors"], recv["errors"])
    assert send["completed"] >= 100
    assert recv["verified"] == recv["completed"] >= send["completed"]
    # memory
    for side in (send, recv):
        assert side["rss_peak_growth_mib"] < RSS_TOLERANCE_MIB, side
    assert (tmp_path / "soak.png").stat().st_size > 10_000
