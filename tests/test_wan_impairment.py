"""The emulated link's per-packet decisions (no I/O, explicit time: deterministic)."""

import numpy as np
import pytest

from sdr.backends.wan import LinkDirection, LinkSpec
from sdr.errors import ConfigError
from sdr.simulator.loss import GilbertElliott


def test_lossless_serialization_and_delay():
    link = LinkDirection(LinkSpec(rate="1Gbit/s", rtt="20ms"))
    v1 = link.admit(0.0, 1250)  # 10 us on the wire
    v2 = link.admit(0.0, 1250)  # queued behind the first
    assert v1.deliver_at == pytest.approx((10e-6 + 0.010,))
    assert v2.deliver_at == pytest.approx((20e-6 + 0.010,))
    assert link.queued_bytes(0.0) == pytest.approx(2500)
    assert link.queued_bytes(1.0) == 0


def test_drop_tail_queue_bounds_the_backlog():
    link = LinkDirection(LinkSpec(rate="8Mbit/s", rtt="10ms", queue=10_000))
    verdicts = [link.admit(0.0, 1000) for _ in range(15)]
    delivered = [v for v in verdicts if v.deliver_at]
    assert len(delivered) == 10
    assert link.stats["queue_drops"] == 5
    assert all(v.reason == "queue" for v in verdicts[10:])


def test_default_queue_is_one_bdp():
    spec = LinkSpec(rate="1Gbit/s", rtt="25ms")
    assert spec.queue == int(1e9 * 0.025 / 8)


def test_bernoulli_loss_rate_and_seed_determinism():
    def run(seed):
        link = LinkDirection(LinkSpec(rate="100Gbit/s", rtt="1ms", loss=0.01, seed=seed))
        return [bool(link.admit(i * 1e-6, 1000).deliver_at) for i in range(100_000)]

    first = run(4)
    assert first == run(4)
    assert 0.009 < 1 - np.mean(first) < 0.011


def test_bursty_loss_comes_in_runs():
    link = LinkDirection(
        LinkSpec(
            rate="100Gbit/s", rtt="1ms", loss=GilbertElliott.from_rate(0.01, mean_burst=20), seed=1
        )
    )
    lost = np.array([not link.admit(i * 1e-6, 1000).deliver_at for i in range(200_000)])
    runs = np.diff(np.flatnonzero(np.diff(np.r_[0, lost.astype(int), 0])))[::2]
    assert 0.007 < lost.mean() < 0.013
    assert runs.mean() > 10  # i.i.d. loss at 1% would give runs of ~1


def test_reorder_duplicate_corrupt_blackout():
    spec = LinkSpec(
        rate="10Gbit/s",
        rtt="2ms",
        reorder=0.1,
        reorder_delay="5ms",
        duplicate=0.1,
        corrupt=0.1,
        blackouts=((0.5, 0.6),),
        seed=2,
    )
    link = LinkDirection(spec)
    times = [i * 1e-3 for i in range(1000)]
    verdicts = [link.admit(t, 1000) for t in times]
    stats = link.stats
    assert stats["blackout_drops"] == 100  # every packet in [0.5 s, 0.6 s)
    assert 60 < stats["reordered"] < 120 and 60 < stats["duplicated"] < 120
    assert 60 < stats["corrupted"] < 120
    late = [
        v
        for t, v in zip(times, verdicts, strict=True)
        if v.deliver_at and v.deliver_at[0] > t + 0.005
    ]  # noqa: E501
    assert len(late) == stats["reordered"]
    assert sum(len(v.deliver_at) == 2 for v in verdicts) == stats["duplicated"]
    packet = bytearray(100)
    link.corrupt_bytes(packet, skip=28)
    assert not any(packet[:28]) and sum(bin(b).count("1") for b in packet) == 1


@pytest.mark.parametrize("bad", [{"rate": 0}, {"reorder": 2.0}, {"loss": 1.5}, {"rtt": "fast"}])
def test_bad_specs(bad):
    with pytest.raises(ConfigError):
        LinkSpec(**bad)
