"""The congestion controllers' rules, fed events by hand (no clock, no simulator)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdr.congestion import (
    BbrLike,
    DelayBased,
    FixedRate,
    available_controllers,
    check_congestion_name,
    controller_for,
    register_controller,
    resolve_auto,
)
from sdr.congestion.registry import CONTROLLERS
from sdr.errors import ConfigError

RTT = 0.025
PKT = 4096


def _steady(cc: DelayBased, *, t0: float, rtts: int, queue: float, rate: float = 1e9) -> float:
    """Feed ``rtts`` round trips of per-packet ACKs whose RTT is RTT + ``queue``."""
    per_rtt = int(rate * RTT / 8 / PKT)
    t = t0
    for _ in range(rtts):
        for _ in range(per_rtt):
            t += RTT / per_rtt
            cc.on_sent(t, PKT)
            cc.on_ack(t, PKT, RTT + queue)
    return t


def test_fixed_ignores_everything() -> None:
    cc = controller_for("fixed", "2Gbit/s")
    assert isinstance(cc, FixedRate)
    cc.on_sent(0.0, PKT)
    cc.on_ack(0.1, PKT, 0.5)
    cc.on_loss(0.2, 10 * PKT, None)
    assert cc.pacing_rate == 2e9 and cc.cwnd == math.inf


def test_delay_runs_through_thousands_of_calm_rounds() -> None:
    """The hyperactive increase doubled per calm round as 2.0 ** rounds, which overflowed
    after ~1026 calm rounds (about 1.1 s of a 1 ms path): on_ack raised OverflowError."""
    cc = DelayBased(1e9)
    t = 0.0
    for _ in range(3000):  # 3000 round trips of 1 ms, no queue: every round is calm
        t += 1e-3
        cc.on_sent(t, PKT)
        cc.on_ack(t, PKT, 1e-3)
    assert cc.pacing_rate == pytest.approx(1e9)  # at its maximum, no error


def test_delay_random_loss_does_not_cut() -> None:
    cc = DelayBased(1e9)
    t = _steady(cc, t0=0.0, rtts=4, queue=0.0)
    for i in range(200):  # a loss every few packets, with no queue
        cc.on_loss(t + i * 1e-4, PKT, None, sent_at=t + i * 1e-4 - RTT)
    t = _steady(cc, t0=t + 0.02, rtts=2, queue=0.0)
    assert cc.pacing_rate == pytest.approx(1e9)
    assert cc.decreases == 0


def test_delay_loss_hinted_random_is_ignored_even_with_a_queue() -> None:
    cc = DelayBased(1e9)
    t = _steady(cc, t0=0.0, rtts=2, queue=0.0)
    cc.queue_delay = 0.01
    cc.on_loss(t, PKT, True, sent_at=t)
    assert cc.decreases == 0


def test_delay_rising_delay_cuts_once_per_rtt() -> None:
    cc = DelayBased(1e9)
    t = _steady(cc, t0=0.0, rtts=4, queue=0.0)
    before = cc.pacing_rate
    # a queue of 5 ms (over the 1.25 ms target) for one RTT: it shows once the standing
    # RTT (the smallest sample of half an RTT) rises, and it is one cut, not one per ACK
    for i in range(250):
        cc.on_ack(t + i * 1e-4, PKT, RTT + 0.005)
    assert cc.decreases == 1
    assert 0.5 * before <= cc.pacing_rate < 0.95 * before


def test_delay_loss_burst_with_rising_delay_cuts() -> None:
    cc = DelayBased(1e9)
    t = _steady(cc, t0=0.0, rtts=4, queue=0.0)
    for i in range(300):  # the queue grows over 2 x target (12 ms in 30 ms)
        cc.on_ack(t + i * 1e-4, PKT, RTT + 4e-5 * i)
    assert cc.queue_delay > 2 * cc.target_delay
    cuts = cc.decreases
    rate = cc.pacing_rate
    cc.on_loss(t + 0.03, PKT, None, sent_at=t + 0.03)
    assert cc.decreases == cuts + 1
    assert cc.pacing_rate <= 0.7 * rate + 1


def test_delay_additive_increase_is_capped_at_max_rate() -> None:
    cc = DelayBased(5e8, max_rate=1e9)
    _steady(cc, t0=0.0, rtts=40, queue=0.0, rate=5e8)
    assert cc.pacing_rate == pytest.approx(1e9)


def test_delay_target_follows_min_rtt() -> None:
    cc = DelayBased(1e9)
    for i in range(3):  # the minimum is a median of three samples
        cc.on_ack(i * 1e-3, PKT, 0.1)
    assert cc.target_delay == pytest.approx(0.005)
    assert DelayBased(1e9, target=0.002).target_delay == 0.002


def _noisy(cc: DelayBased, *, t0: float, rtts: int, queue: float, seed: int = 1) -> float:
    """SACK-like samples (one per 2.5 ms, 160 KiB each at 1 Gbit/s) whose RTT carries the
    host noise measured on the emulator: lognormal, p50 2.55 ms, p10 1.2, p99 9.5 ms."""
    rng = np.random.default_rng(seed)
    t, step = t0, 2.5e-3
    nbytes = 1e9 / 8 * step
    for _ in range(int(rtts * RTT / step)):
        t += step
        cc.on_sent(t, nbytes)
        cc.on_ack(t, nbytes, RTT + queue + 2.55e-3 * float(rng.lognormal(0.0, 0.57)))
    return t


def test_delay_host_noise_is_not_a_queue() -> None:
    # before the noise filters the rate was cut about once per RTT to a few % of the link
    cc = DelayBased(1e9)
    _noisy(cc, t0=0.0, rtts=80, queue=0.0)
    assert cc.pacing_rate >= 0.9e9, cc.state()
    assert 1.25e-3 < cc.target_delay <= 0.25 * RTT + 3e-3  # the target rose above the noise
    assert cc.base_rtt < RTT + 2e-3


def test_delay_a_queue_still_shows_through_host_noise() -> None:
    cc = DelayBased(1e9)
    t = _noisy(cc, t0=0.0, rtts=20, queue=0.0)
    before, cuts = cc.pacing_rate, cc.decreases
    _noisy(cc, t0=t, rtts=4, queue=0.015, seed=2)  # a 15 ms standing queue
    assert cc.decreases > cuts and cc.pacing_rate < 0.8 * before


def test_delay_one_low_sample_does_not_move_the_minimum() -> None:
    cc = DelayBased(1e9)
    t = _steady(cc, t0=0.0, rtts=2, queue=0.0)
    cc.on_ack(t + 1e-4, PKT, RTT - 0.0055)  # a departure stamped late, once
    t = _steady(cc, t0=t + 2e-4, rtts=2, queue=0.0)
    assert cc.base_rtt == pytest.approx(RTT)
    assert cc.decreases == 0 and cc.queue_delay == 0.0


def test_bbr_startup_exits_and_cycles() -> None:
    cc = BbrLike(1e9, seed=3)
    per_rtt = int(1e9 * RTT / 8 / PKT)
    t = 0.0
    modes = set()
    for _ in range(30):
        for _ in range(per_rtt):
            t += RTT / per_rtt
            cc.on_sent(t, PKT)
            cc.on_ack(t, PKT, RTT)
        modes.add(cc.mode)
    assert cc.mode == "probe_bw" and "startup" not in {cc.mode}
    assert cc.bandwidth == pytest.approx(1e9, rel=0.05)
    assert cc.bdp == pytest.approx(1e9 / 8 * RTT, rel=0.05)
    assert cc.cwnd == pytest.approx(2 * cc.bdp + 3 * PKT, rel=0.01)


def test_bbr_ignores_moderate_loss() -> None:
    cc = BbrLike(1e9)
    per_rtt = int(1e9 * RTT / 8 / PKT)
    t = 0.0
    for _ in range(20):
        for i in range(per_rtt):
            t += RTT / per_rtt
            cc.on_ack(t, PKT, RTT)
            if i % 50 == 0:
                cc.on_loss(t, PKT)
    assert cc.bandwidth == pytest.approx(1e9, rel=0.05)


def test_registry_names_and_errors() -> None:
    assert {"fixed", "delay", "bbr"} <= set(available_controllers())
    assert check_congestion_name("Delay") == "delay"
    assert check_congestion_name("auto") == "auto"
    with pytest.raises(ConfigError, match="'vegas' is not a known congestion controller"):
        check_congestion_name("vegas")
    with pytest.raises(ConfigError, match="reserved"):
        register_controller("auto", FixedRate)
    with pytest.raises(ConfigError, match="already registered"):
        register_controller("fixed", FixedRate)
    with pytest.raises(ConfigError, match="bogus"):
        controller_for("delay", 1e9, bogus=1)
    with pytest.raises(ConfigError, match="rate"):
        controller_for("delay", "fast")
    with pytest.raises(ConfigError, match="needs a rate"):
        controller_for("bbr", None)


def test_auto_and_user_registration() -> None:
    assert resolve_auto(1e9) == "delay" and resolve_auto(None) == "bbr"
    assert isinstance(controller_for("auto", 1e9), DelayBased)
    assert isinstance(controller_for("auto", None, max_rate=1e9), BbrLike)

    class Half(FixedRate):
        name = "half"

        @property
        def pacing_rate(self) -> float:
            return self.rate / 2

    register_controller("half", Half)
    try:
        assert controller_for("half", 1e9).pacing_rate == 5e8
    finally:
        CONTROLLERS.unregister("half")
    register_controller("not-a-cc", lambda rate, **kw: object())
    try:
        with pytest.raises(ConfigError, match="not a CongestionController"):
            controller_for("not-a-cc", 1e9)
    finally:
        CONTROLLERS.unregister("not-a-cc")


@pytest.mark.parametrize("name", ["fixed", "delay", "bbr"])
def test_conformance_every_builtin(name: str) -> None:
    """What every registered controller must do: outputs finite and positive, in-flight
    accounting exact, a window that never blocks an idle sender."""
    cc = controller_for(name, 1e9)
    assert cc.can_send(PKT)
    t = 0.0
    for i in range(2000):
        t += 3e-5
        cc.on_sent(t, PKT)
        if i >= 100:
            if i % 97 == 0:
                cc.on_loss(t, PKT, None, sent_at=t - RTT)
            else:
                cc.on_ack(t, PKT, RTT + (i % 7) * 1e-4)
        assert 0 < cc.pacing_rate <= cc.max_rate
        assert cc.cwnd > 0
    lost = sum(1 for i in range(100, 2000) if i % 97 == 0)
    assert cc.in_flight == pytest.approx((100) * PKT, abs=1)
    assert cc.lost == lost * PKT
    state = cc.state()
    assert state["controller"] == name


@pytest.mark.parametrize(
    "kwargs", [{"rate": 0}, {"rate": float("nan")}, {"rate": 1e9, "max_rate": 1e8}, {"rate": True}]
)
def test_bad_rates_are_one_line_errors(kwargs: dict) -> None:
    with pytest.raises(ConfigError) as info:
        DelayBased(**kwargs)
    assert "\n" not in str(info.value)


def test_the_delay_target_takes_units_as_every_config_time_does() -> None:
    from sdr.congestion import controller_for

    assert controller_for("delay", 1e9, target="10ms").target == pytest.approx(0.01)
    with pytest.raises(ConfigError, match="target: time '10' has no unit"):
        controller_for("delay", 1e9, target="10")
