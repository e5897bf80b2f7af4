"""Scheme selection (what `scheme = "auto"` calls)."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from sdr.errors import ConfigError
from sdr.simulator import analytic
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec, parse_ec
from sdr.simulator.select import Selection, select_scheme

LINK = Link.from_distance(3.75e6, 400e9)


def test_ec_wins_mid_size_lossy_writes() -> None:
    choice = select_scheme(LINK, 8 * 2**20, 1e-3)
    assert isinstance(choice, Selection)
    assert choice.scheme in ("ec-mds", "ec-xor")
    assert {"k", "m", "rto_rtts", "chunk_size"} <= set(choice.params)
    spec = SchemeSpec(choice.scheme, k=choice.params["k"], m=choice.params["m"])
    assert choice.mean_s == pytest.approx(analytic.scheme_mean(LINK, 8 * 2**20, 1e-3, spec))
    best_sr = min(
        analytic.sr_mean(LINK, 8 * 2**20, 1e-3, SchemeSpec(s)) for s in ("sr-rto", "sr-nack")
    )
    assert choice.mean_s < best_sr


def test_sr_wins_huge_writes_on_clean_links() -> None:
    # the paper: SR wins for writes >= ~1 GiB at drop < 1e-6 (EC pays its parity)
    choice = select_scheme(LINK, 8 * 2**30, 1e-8)
    assert choice.scheme.startswith("sr-")


def test_ranking_is_sorted_by_objective() -> None:
    choice = select_scheme(LINK, 64 * 2**20, 1e-2, objective="p999")
    values = [row["p999_s"] for row in choice.ranking]
    assert values == sorted(values)
    assert choice.p999_s == values[0]
    assert choice.to_dict().keys() == {"scheme", "params", "mean_s", "p999_s"}


def test_packet_drop_unit_varies_chunk_size() -> None:
    choice = select_scheme(LINK, 8 * 2**20, 1e-4, drop_unit="packet")
    sizes = {row["params"]["chunk_size"] for row in choice.ranking}
    assert sizes == {4096, 16384, 65536, 262144, 1048576}
    fixed = select_scheme(LINK, 8 * 2**20, 1e-4)
    assert {row["params"]["chunk_size"] for row in fixed.ranking} == {65536}


def test_toml_snippet_parses_and_loads_into_the_sdk_config() -> None:
    from sdr.reliability.config import loads

    choice = select_scheme(LINK, 8 * 2**20, 1e-3, schemes=["ec-mds"], ec_codes=[(32, 8)])
    config = tomllib.loads(choice.to_toml())
    assert config["reliability"] == {
        "scheme": "ec-mds",
        "rtt": "25ms",
        "link_rate": "400Gbit/s",
        "alpha": 2.0,
        "k": 32,
        "m": 8,
        "chunk_size": "64KiB",
    }
    loaded = loads(choice.to_toml())
    assert (loaded.scheme, loaded.k, loaded.m, loaded.chunk_size) == ("ec-mds", 32, 8, 65536)
    assert loaded.rtt == pytest.approx(0.025) and loaded.rto == pytest.approx(0.075)
    sr = select_scheme(LINK, 8 * 2**20, 1e-3, schemes=["sr-rto"], sr_rto_rtts=[4.0])
    assert sr.params["rto_rtts"] == 4.0
    assert loads(sr.to_toml()).rto == pytest.approx(4 * 0.025)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="objective"):
        select_scheme(LINK, 2**20, 1e-3, objective="p50")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown scheme"):
        select_scheme(LINK, 2**20, 1e-3, schemes=["tcp"])
    with pytest.raises(ConfigError, match="K,M"):
        parse_ec("32")
    assert parse_ec("16,4") == (16, 4)


def test_select_table_shows_how_far_each_row_is_from_the_best() -> None:
    """Candidates within 4 significant digits of each other do not all read the same."""
    import subprocess
    import sys
    from pathlib import Path

    sdr = str(Path(sys.executable).with_name("sdr"))
    args = ["select", "--size", "8MiB", "--rtt", "25ms", "--drop", "1e-3"]
    result = subprocess.run([sdr, *args], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "mean vs best" in result.stdout
    rows = [
        line
        for line in result.stdout.splitlines()
        if line.startswith("│ ec-") or line.startswith("│ sr-")
    ]
    # the ten best, and the best of every scheme below them (four schemes at most)
    assert 10 <= len(rows) <= 14
    assert {r.split("│")[1].strip() for r in rows} >= {"sr-rto", "sr-nack", "ec-mds", "ec-xor"}
    assert rows[0].rstrip(" │").endswith("best")
    deltas = [row.rstrip(" │").rsplit(" ", 1)[-1] for row in rows[1:]]
    assert all(d.startswith("+") and d.endswith("%") for d in deltas), deltas
    assert len(set(deltas)) > 1
    # rows whose mean is not scored for p99.9 say so instead of leaving a blank
    assert "only with --objective p999" in " ".join(result.stdout.split())


def test_select_says_which_candidates_the_model_left_out() -> None:
    """At 5e-2 per packet the large-chunk candidates are beyond the models; ``sdr select``
    ranks the rest and says, in one line on stderr, how many it left out and why (it left
    them out silently: docs/simulator.md promised the line)."""
    import subprocess
    import sys
    from pathlib import Path

    link = Link(10e9, 0.03)
    choice = select_scheme(link, 1 << 20, 5e-2, drop_unit="packet")
    assert choice.refused and all(" chunks: " in why for why in choice.refused)
    ranked = {(r["scheme"], r["params"]["chunk_size"]) for r in choice.ranking}
    assert not any(f"{s} with {c} B chunks" in why for s, c in ranked for why in choice.refused)
    assert not select_scheme(link, 1 << 20, 1e-6, drop_unit="packet").refused

    sdr = str(Path(sys.executable).with_name("sdr"))
    args = ["select", "--size", "1MiB", "--rtt", "30ms", "--rate", "10G", "--loss", "5e-2"]
    result = subprocess.run([sdr, *args], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (note,) = result.stderr.splitlines()
    assert note.startswith(f"note: {len(choice.refused)} candidates left out"), note


def test_the_nack_schemes_rto_passed_back_gives_no_spurious_repairs() -> None:
    # select reported rto_rtts = 1.0 for sr-nack (the models' repair delay: a NACK's RTT);
    # passed back as the scheme's RTO it fired before every ACK: ~100 spurious
    # retransmissions per write. rto_rtts is now the SDK's RTO, retry_rtts the delay
    from sdr.simulator.des import simulate_writes

    link = Link(10e9, 0.001)
    choice = select_scheme(link, 4 * 2**20, 1e-3, schemes=("sr-nack",))
    assert choice.params["rto_rtts"] == link.default_rto_rtts
    assert choice.params["retry_rtts"] == 1.0
    spec = SchemeSpec("sr-nack", rto_rtts=choice.params["rto_rtts"])
    run = simulate_writes(link, 4 * 2**20, spec, None, samples=3, seed=1)
    assert run.failed == 0 and (run.retransmissions == 0).all()
    assert choice.mean_s == pytest.approx(analytic.sr_mean(link, 4 * 2**20, 1e-3, spec))


_HEAVY_LOSS = """
import json, math, resource
from sdr.simulator.link import Link
from sdr.simulator.select import select_scheme
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base, out = peak(), []
for loss in (5e-2, 3e-2, 0.3):
    link = Link(10e9, 0.03)
    choice = select_scheme(link, 1 << 20, loss, drop_unit="packet")
    finite = bool(choice.ranking) and all(math.isfinite(r["mean_s"]) for r in choice.ranking)
    out.append([loss, finite, choice.mean_s >= link.rtt, peak() - base])
print(json.dumps(out))
"""


def test_select_answers_at_heavy_loss_in_bounded_memory() -> None:
    # in a fresh process, so its peak resident memory is the model's (tracemalloc made
    # the same check five times slower)
    import json
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _HEAVY_LOSS], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    for loss, finite, above_rtt, grown in json.loads(run.stdout):
        assert finite and above_rtt, loss
        assert grown < 256 << 20, loss  # the old level matrix wanted 5.54 PiB at 5e-2


def test_sr_model_memory_is_linear_in_the_retry_levels() -> None:
    import tracemalloc

    from sdr.simulator import sr_model

    n, p, t, o = 64, 0.9995, 1e-6, 1e-3  # ~90,000 retry levels
    levels = sr_model.retry_levels(n, p)
    assert levels > 50_000
    tracemalloc.start()
    mean = sr_model.max_delay_mean(n, p, t, o)
    cdf = sr_model.max_delay_cdf(np.linspace(0, 200 * o * levels / 1000, 2000), n, p, t, o)
    q = sr_model.max_delay_quantile(0.999, n, p, t, o)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 200 * levels * 8  # a few arrays of the levels, not levels x points
    assert n * t < mean < q and np.all(np.diff(cdf) >= 0)
    assert sr_model.max_delay_cdf(q, n, p, t, o)[0] >= 0.999


def test_sr_model_refuses_a_drop_too_close_to_one_in_one_line() -> None:
    from sdr.simulator import sr_model

    with pytest.raises(ConfigError, match="too close to 1") as info:
        sr_model.max_delay_mean(256, 1 - 2e-6, 1e-6, 1e-3)
    assert "\n" not in str(info.value)
