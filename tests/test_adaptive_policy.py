"""The adaptive policy's switching rules, the analytic selector and the Schedule loss model."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from sdr.adaptive import AdaptivePolicy, Candidate, LinkEstimate, LinkEstimator
from sdr.errors import ConfigError
from sdr.simulator.adaptive_select import analytic_selector
from sdr.simulator.loss import Bernoulli, Schedule

SR, EC = Candidate("sr-nack"), Candidate("ec-mds", 32, 8)


class Scripted:
    """A selector returning scores from a list, one dict per evaluation."""

    def __init__(self, rounds):
        self.rounds = list(rounds)
        self.calls = 0

    def __call__(self, est, size, cands):
        self.calls += 1
        return self.rounds.pop(0)


def fed(policy: AdaptivePolicy) -> AdaptivePolicy:
    policy.estimator.observe_loss(0.0, 1000, 5, 5)
    return policy


def test_switch_needs_patience_consecutive_wins_beyond_gain(caplog):
    sel = Scripted(
        [
            {SR: 1.0, EC: 0.5},  # win 1
            {SR: 1.0, EC: 0.99},  # within gain: streak resets
            {SR: 1.0, EC: 0.5},  # win 1
            {SR: 1.0, EC: 0.6},  # win 2 -> switch
        ]
    )
    policy = fed(
        AdaptivePolicy(sel, [SR, EC], interval=0.0, gain=0.1, patience=2, strong_gain=None)
    )
    caplog.set_level(logging.INFO, logger="sdr.adaptive.policy")
    chosen = [policy.before_write(float(t), 1 << 20) for t in range(4)]
    assert chosen == [SR, SR, SR, EC]
    assert len(policy.switches) == 1
    sw = policy.switches[0]
    assert (sw.old, sw.new, sw.time) == (SR, EC, 3.0)
    assert "40% faster" in sw.reason and "2 consecutive evaluation" in sw.reason
    assert "switch sr-nack -> ec-mds(32,8)" in caplog.text


def test_a_strong_margin_switches_at_once():
    sel = Scripted([{SR: 1.0, EC: 0.9}, {SR: 1.0, EC: 0.8}])
    policy = fed(AdaptivePolicy(sel, [SR, EC], interval=0.0, gain=0.05, strong_gain=0.2))
    assert policy.before_write(0.0, 1) == SR  # 11% faster: one evaluation is not enough
    assert policy.before_write(1.0, 1) == EC  # 25% faster: strong, at once (streak 2 anyway)
    sel2 = Scripted([{SR: 1.0, EC: 0.7}])
    policy2 = fed(AdaptivePolicy(sel2, [SR, EC], interval=0.0, strong_gain=0.2))
    assert policy2.before_write(0.0, 1) == EC
    assert "in 1 consecutive evaluation(s)" in policy2.switches[0].reason


def test_evaluations_respect_interval_and_min_trials():
    sel = Scripted([{SR: 1.0, EC: 2.0}] * 10)
    policy = AdaptivePolicy(sel, [SR, EC], interval=1.0, min_trials=100)
    policy.before_write(0.0, 100)
    assert sel.calls == 0  # no evidence yet
    fed(policy)
    for t in (0.0, 0.5, 0.9, 1.0, 1.5, 2.2):
        policy.before_write(t, 100)
    assert sel.calls == 3  # at 0.0, 1.0, 2.2
    assert policy.choices == {SR: 7}


def test_a_changing_winner_restarts_the_streak():
    xor = Candidate("ec-xor", 32, 8)
    sel = Scripted([{SR: 1.0, EC: 0.5, xor: 0.9}, {SR: 1.0, EC: 0.9, xor: 0.5}])
    policy = fed(AdaptivePolicy(sel, [SR, EC, xor], interval=0.0, patience=2, strong_gain=None))
    policy.before_write(0.0, 1)
    policy.before_write(1.0, 1)
    assert policy.current == SR and not policy.switches


def test_policy_validation():
    with pytest.raises(ConfigError):
        AdaptivePolicy(None, [])
    with pytest.raises(ConfigError):
        AdaptivePolicy(None, [SR], initial=EC)
    with pytest.raises(ConfigError):
        AdaptivePolicy(None, [SR], patience=0)
    with pytest.raises(ConfigError, match="never reached"):
        AdaptivePolicy(None, [SR], min_trials=64, estimator=LinkEstimator(half_life_chunks=32))


def test_analytic_selector_prefers_sr_when_clean_and_ec_when_lossy():
    sel = analytic_selector(link_rate="250Mbit/s", rtt="50ms", mtu=8192, chunk_size="64KiB")
    cands = [SR, EC, Candidate("sr-rto")]
    clean = sel(LinkEstimate(8e-6, 1.0, 0.05, None, 1e4), 2 << 20, cands)
    lossy = sel(LinkEstimate(0.077, 1.0, 0.05, None, 1e4), 2 << 20, cands)
    assert min(clean, key=clean.get) == SR
    assert min(lossy, key=lossy.get) == EC
    assert clean[EC] > clean[SR] * 1.1  # EC pays its parity on a clean link
    again = sel(LinkEstimate(7.9e-6, 1.0, 0.05, None, 1e4), 2 << 20, cands)
    assert again == clean  # quantized inputs: served from the cache


def test_schedule_switches_models_by_packet_count():
    sched = Schedule([(3, Bernoulli(0.0)), (2, Bernoulli(0.9999)), (0, Bernoulli(0.0))])
    rng = np.random.default_rng(0)
    drops = [sched.drop(rng) for _ in range(8)]
    assert drops == [False, False, False, True, True, False, False, False]
    assert [sched.phase_at(i) for i in (0, 2, 3, 4, 5, 100)] == [0, 0, 1, 1, 2, 2]
    sample = sched.sample(rng, 4, 8)
    assert sample.shape == (4, 8)
    assert not sample[:, :3].any() and sample[:, 3:5].all() and not sample[:, 5:].any()
    assert sched.mean_rate() == 0.0 and sched.chunk_drop_probability(8) is None


def test_schedule_validation():
    with pytest.raises(ConfigError):
        Schedule([])
    with pytest.raises(ConfigError):
        Schedule([(-1, Bernoulli(0.1))])
