"""The link defined once: one LinkSpec, one LinkDirection, scheduled by the simulator and
applied by the emulator's forwarder, deciding the same for the same packets and seed."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sdr.backends.wan import LinkDirection as WanLinkDirection
from sdr.backends.wan import LinkSpec as WanLinkSpec
from sdr.backends.wan.forwarder import Forwarder
from sdr.errors import ConfigError
from sdr.simulator.des import DesOptions
from sdr.simulator.des_link import DirectionScheduler
from sdr.simulator.link import Link
from sdr.simulator.link_model import (
    BLACKOUT,
    DELIVERED,
    LOSS,
    QUEUE,
    LinkDirection,
    LinkSpec,
    flip_bit,
)
from sdr.simulator.loss import Bernoulli, GilbertElliott


def test_the_emulator_exports_the_one_link() -> None:
    assert WanLinkSpec is LinkSpec and WanLinkDirection is LinkDirection


def _bursts(seed: int, count: int = 120) -> list[tuple[float, list[bytes]]]:
    """Bursts of 1..40 packets of random sizes, some close enough to fill the queue."""
    rng = np.random.default_rng(seed)
    t, out = 0.0, []
    for _ in range(count):
        t += float(rng.exponential(2e-4))
        sizes = rng.integers(64, 1500, int(rng.integers(1, 40)))
        out.append((t, [bytes(int(s)) for s in sizes]))
    return out


SPEC = LinkSpec(
    rate="200Mbit/s",
    rtt="4ms",
    queue=30_000,
    loss=GilbertElliott.from_rate(0.05, mean_burst=4),
    reorder=0.1,
    reorder_delay="0.3ms",
    reorder_jitter="0.2ms",
    blackouts=((0.004, 0.006),),
    seed=11,
)


def _forwarder_path(spec: LinkSpec, bursts) -> dict[int, float]:
    """Packet number -> delivery time through the emulator's forwarder (no sockets)."""
    fwd = Forwarder([], spec, spec, corrupt_skip=0)
    number = 0
    for now, packets in bursts:
        tagged = [i.to_bytes(4, "big") + p[4:] for i, p in enumerate(packets, number)]
        fwd.offer(0, now, tagged)
        number += len(packets)
    return {int.from_bytes(p[:4], "big"): when for when, _, p in fwd.take_due(float("inf"))}


def _simulator_path(spec: LinkSpec, bursts) -> dict[int, float]:
    """Packet number -> arrival time through the DES scheduler on simpy time."""
    env = simpy.Environment()
    link = DirectionScheduler(env, spec)
    out: dict[int, float] = {}

    def post():
        number = 0
        for now, packets in bursts:
            yield env.timeout(now - env.now)
            first = number

            def land(a, b, arrive, first=first):
                for i, when in enumerate(arrive.tolist(), first + a):
                    if when == when:
                        out[i] = when

            sizes = np.array([len(p) for p in packets], np.float64)
            link.submit(np.full(len(packets), now), sizes, False, land)
            number += len(packets)

    env.process(post())
    env.run()
    return out


def test_simulator_and_forwarder_decide_the_same() -> None:
    bursts = _bursts(3)
    emulated, simulated = _forwarder_path(SPEC, bursts), _simulator_path(SPEC, bursts)
    total = sum(len(p) for _, p in bursts)
    assert emulated.keys() == simulated.keys()
    assert 0.3 * total < len(emulated) < 0.95 * total  # every cause dropped some
    for number, when in emulated.items():
        assert simulated[number] == pytest.approx(when, rel=1e-12, abs=1e-12)


def test_drop_causes_are_counted_and_the_same_either_way() -> None:
    bursts = _bursts(5)
    ways = []
    for split in (True, False):
        d = LinkDirection(SPEC)
        causes = []
        for now, packets in bursts:
            sizes = np.array([len(p) for p in packets], np.float64)
            if split:  # one packet at a time
                causes += [
                    int(d.offer(np.array([now]), sizes[i : i + 1]).cause[0])
                    for i in range(len(sizes))
                ]
            else:
                causes += d.offer(np.full(len(sizes), now), sizes).cause.tolist()
        ways.append((causes, d.stats.as_dict()))
    (causes, stats), (causes2, stats2) = ways
    assert causes == causes2
    stats.pop("max_backlog_bytes"), stats2.pop("max_backlog_bytes")
    assert stats == stats2
    counted = {c: causes.count(c) for c in (DELIVERED, QUEUE, BLACKOUT, LOSS)}
    assert all(counted.values())
    assert stats["queue_drops"] == counted[QUEUE]
    assert stats["blackout_drops"] == counted[BLACKOUT]
    assert stats["loss_drops"] == counted[LOSS]
    assert stats["delivered"] == counted[DELIVERED]


def test_duplicates_and_corruption_do_not_depend_on_batching() -> None:
    spec = LinkSpec(rate="10Gbit/s", rtt="1ms", duplicate=0.2, corrupt=0.2, seed=4)
    starts, sizes = np.arange(500) * 1e-5, np.full(500, 1000.0)
    whole = LinkDirection(spec).offer(starts, sizes)
    single = LinkDirection(spec)
    verdicts = [single.admit(t, 1000) for t in starts.tolist()]
    dup = whole.duplicate_at == whole.duplicate_at
    assert [len(v.deliver_at) == 2 for v in verdicts] == dup.tolist()
    assert [v.corrupt for v in verdicts] == whole.corrupt.tolist()
    assert 60 < dup.sum() < 140 and 60 < whole.corrupt.sum() < 140


def test_reorder_jitter_and_fixed_delay() -> None:
    spec = LinkSpec(
        rate="10Gbit/s", rtt="2ms", reorder=0.5, reorder_delay="1ms", reorder_jitter="1ms", seed=1
    )
    d = LinkDirection(spec)
    arrive = d.offer(np.arange(2000) * 1e-4, np.full(2000, 125.0)).arrive
    extra = arrive - (np.arange(2000) * 1e-4 + 1e-7 + 1e-3)
    held = extra > 1e-9
    assert d.stats.reordered == held.sum() and 800 < held.sum() < 1200
    assert extra[held].min() >= 1e-3 - 1e-12 and extra[held].max() <= 2e-3 + 1e-12


def test_control_messages_have_their_own_loss_model() -> None:
    spec = LinkSpec(rate="10Gbit/s", rtt="1ms", loss=None, control_loss=Bernoulli(0.5), seed=2)
    d = LinkDirection(spec)
    control = np.arange(1000) % 2 == 0
    decided = d.offer(np.arange(1000) * 1e-6, np.full(1000, 100.0), control)
    assert (decided.cause[~control] == DELIVERED).all()
    assert 200 < d.stats.control_lost < 300 and d.stats.loss_drops == 0
    assert d.stats.control_packets == 500 and d.stats.packets == 500


def test_one_spec_serves_both_directions_with_their_own_loss_state() -> None:
    spec = LinkSpec(loss=GilbertElliott(0.1, 0.5), seed=1)
    a, b = LinkDirection(spec), LinkDirection(spec)
    a.offer(np.zeros(10), np.full(10, 100.0))
    assert a.loss is not b.loss and a.loss.bad is not None and b.loss.bad is None
    assert spec.loss.bad is None


def test_the_simulator_builds_its_spec_from_the_analytic_link() -> None:
    link = Link(1e9, 0.02)
    spec = DesOptions(reorder=0.1, reorder_jitter=1e-4).spec(link, None)
    assert spec.rate == link.rate == 1e9 and spec.rtt == link.rtt and spec.queue == link.queue
    assert spec.one_way_delay == link.one_way_delay == 0.01
    assert spec.reorder_delay == 0 and spec.reorder_jitter == 1e-4
    env = simpy.Environment()
    with pytest.raises(ConfigError, match="duplication or corruption"):
        DirectionScheduler(env, LinkSpec(duplicate=0.1))


def test_flip_bit_keeps_the_header() -> None:
    packet = bytearray(40)
    flip_bit(packet, 28, 0.999, 7)
    assert not any(packet[:28]) and packet[39] == 0x80
    short = bytearray(10)
    flip_bit(short, 28, 0.5, 1)
    assert not any(short)


@pytest.mark.parametrize(
    "bad",
    [
        {"queue": 0},
        {"reorder": 0.1, "reorder_delay": 0},
        {"blackouts": ((2.0, 1.0),)},
        {"loss": "often"},
        {"reorder_jitter": -1.0},
        {"rtt": -1.0},
    ],
)
def test_bad_specs_name_the_value(bad) -> None:
    with pytest.raises(ConfigError):
        LinkSpec(**bad)
