"""Small shared-bottleneck runs: the real controllers in the simulator (statistical
assertions on simulated quantities; nothing here depends on this machine's speed)."""

from __future__ import annotations

import numpy as np
import pytest

from sdr.congestion import PathSelector, controller_for
from sdr.errors import ConfigError
from sdr.simulator.bottleneck import Bottleneck, PathSpec, jain
from sdr.simulator.bottleneck_flows import SdrFlow, TcpFlow

RATE = 2e8  # 200 Mbit/s keeps every run to a few thousand packets
RTT = 0.01
BDP = int(RATE * RTT / 8)


def _path(**kw: object) -> PathSpec:
    return PathSpec(**{"rate": RATE, "rtt": RTT, "buffer": BDP, **kw})  # type: ignore[arg-type]


def test_queue_is_a_tail_drop_fifo_at_the_bottleneck_rate() -> None:
    engine = Bottleneck([_path()], seed=1)
    flow = SdrFlow(controller_for("fixed", 2 * RATE))
    engine.add(flow)
    result = engine.run(1.0)
    delivered = result.throughput(0, 0.1)[2:-1]
    assert delivered.mean() == pytest.approx(RATE, rel=0.02)
    assert result.queue_delay[0].max() <= BDP * 8 / RATE + 1e-9
    assert 0 <= result.drops[0] - flow.losses < 200  # the rest: not reported yet at the end
    assert 0.4 < result.drops[0] * 4096 / (2 * RATE / 8) < 0.6  # about half is dropped


def test_bbr_converges_to_the_bottleneck_rate() -> None:
    engine = Bottleneck([_path()], seed=2)
    flow = SdrFlow(controller_for("bbr", RATE, max_rate=3 * RATE))
    engine.add(flow)
    result = engine.run(2.0)
    assert flow.cc.mode == "probe_bw"
    assert flow.cc.bandwidth == pytest.approx(RATE, rel=0.15)
    assert result.throughput(0, 0.25)[2:-1].mean() == pytest.approx(RATE, rel=0.05)


def test_delay_ignores_random_loss_cubic_does_not() -> None:
    size = 8 << 20
    done = {}
    for name in ("fixed", "delay", "cubic"):
        engine = Bottleneck([_path(loss=1e-2)], seed=3)
        flow = (
            TcpFlow("cubic", size=size)
            if name == "cubic"
            else SdrFlow(controller_for(name, RATE), size=size)
        )
        engine.add(flow)
        engine.run(30.0)
        assert flow.finished is not None
        done[name] = flow.finished
    assert done["delay"] <= 1.05 * done["fixed"]
    assert done["cubic"] > 2 * done["fixed"]


def test_two_delay_flows_share_fairly() -> None:
    engine = Bottleneck([_path()], seed=4)
    engine.add(SdrFlow(controller_for("delay", RATE)))
    engine.add(SdrFlow(controller_for("delay", RATE), start=0.5))
    result = engine.run(2.0)
    a, b = result.throughput(0, 0.05), result.throughput(1, 0.05)
    j = [jain([x, y]) for x, y in zip(a[14:-1], b[14:-1], strict=True)]
    assert np.mean(j) > 0.95
    assert (a[14:-1] + b[14:-1]).mean() > 0.75 * RATE


def test_delay_follows_a_capacity_drop() -> None:
    spec = _path(rate=4 * RATE, buffer=int(RATE * 0.02 / 8), steps=((0.5, RATE),))
    engine = Bottleneck([spec], seed=5)
    flow = SdrFlow(controller_for("delay", 4 * RATE))
    engine.add(flow)
    result = engine.run(1.5)
    rt, rv = np.asarray(flow.rate_t), np.asarray(flow.rate_v)
    later = rv[rt > 0.5 + 10 * RTT]
    assert 0.6 * RATE < later.mean() < 1.3 * RATE
    assert (result.drop_t[0] > 0.5 + 5 * RTT).sum() == 0  # no loss after the first RTTs


def test_multipath_moves_off_the_lossy_path() -> None:
    paths = [_path(), _path(), _path(loss=2e-2)]
    engine = Bottleneck(paths, seed=6)
    selector = PathSelector(3)
    flow = SdrFlow(
        controller_for("delay", 3 * RATE), paths=range(3), selector=selector, size=16 << 20
    )
    engine.add(flow)
    engine.run(10.0)
    assert flow.finished is not None
    off = [t for t, p, active in selector.moves if p == 2 and not active]
    assert off and off[0] < 15 * RTT
    assert flow.path_bytes[2] / sum(flow.path_bytes) < 0.15
    ideal = (16 << 20) * 8 / (2 * RATE)
    assert flow.finished < 1.3 * ideal


def test_reno_halves_and_fills_the_link() -> None:
    engine = Bottleneck([_path()], seed=7)
    flow = TcpFlow("reno")
    engine.add(flow)
    result = engine.run(4.0)
    assert flow.losses > 0
    assert result.throughput(0, 0.5)[2:-1].mean() > 0.7 * RATE


def test_bad_specs() -> None:
    with pytest.raises(ConfigError):
        PathSpec(rate=0, rtt=RTT, buffer=BDP)
    with pytest.raises(ConfigError):
        PathSpec(rate=RATE, rtt=RTT, buffer=BDP, loss=1.5)
    with pytest.raises(ConfigError):
        Bottleneck([])
    with pytest.raises(ConfigError):
        TcpFlow("vegas")


def test_the_sweep_measures_a_point_alone_and_against_tcp() -> None:
    from benchmarks.congestion_sweep import run_point

    alone = run_point("delay", 1e-2, 1.0, "none", seed=1, until=3.0)
    assert alone["share_vs_fair"] is None and alone["competitor_mbps"] == 0
    assert alone["utilization"] == pytest.approx(1.0, abs=0.02)  # random loss: no cut
    shared = run_point("delay", 0.0, 1.0, "reno", seed=1, until=3.0)
    total = shared["sdr_mbps"] + shared["competitor_mbps"]
    assert shared["share_vs_fair"] == pytest.approx(2 * shared["sdr_mbps"] / total)
    assert 0 < shared["sdr_mbps"] < 1000 and shared["queue_p95_ms"] > 0


def test_delay_joining_a_standing_cubic_queue_competes_instead_of_fading() -> None:
    def share(**params) -> tuple[float, bool]:
        engine = Bottleneck([PathSpec(rate=1e9, rtt=0.025, buffer=3_125_000)], seed=1)
        engine.add(TcpFlow("cubic"))
        cc = controller_for("delay", 1e9, **params)
        engine.add(SdrFlow(cc, start=1.0))  # its minimum RTT holds CUBIC's queue
        result = engine.run(6.0)
        t, s = result.throughput(0, 0.5)[4:], result.throughput(1, 0.5)[4:]
        return 2 * s.sum() / (s.sum() + t.sum()), cc.competing

    with_detector, competing = share()
    without, _ = share(stuck_windows=10_000)
    assert competing and with_detector > without + 0.04  # 0.43 -> 0.71 over 8 s (seed 1)
    with pytest.raises(ConfigError, match="stuck_windows must be an integer >= 1, got 0"):
        controller_for("delay", 1e9, stuck_windows=0)
