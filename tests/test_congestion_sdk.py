"""Congestion control inside the SDK: config, the scheme's signals, the window, the pacer.

The controllers themselves are tested in test_congestion_controllers.py; here: what feeds
them in a real connection (Selective Repeat's SACKs give Karn RTT samples, its
retransmissions losses), that the window holds a windowed sender back, that the driver
loop hands the controller's rate to the transport's pacer, and that the simulator runs
the same code.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from sdr_pairs import make_pair
from test_reliable_connection import ATTR, Side, Wire, _payload, _register

import sdr
from sdr.congestion import BbrLike, DelayBased
from sdr.congestion.base import CongestionController
from sdr.errors import ConfigError
from sdr.pacing import TokenBucket
from sdr.reliability import (
    ReliabilityConfig,
    WriteCompleted,
)
from sdr.reliability.base import Delivered, Lost
from sdr.reliability.config import loads
from sdr.reliability.connection import congestion_controller
from sdr.reliability.messages import Sack
from sdr.reliability.registry import create_scheme
from sdr.reliability.rto_check import RtoWarning
from sdr.reliability.sr_sender import PROBE_CHUNKS
from sdr.runtime import ReliableQP
from sdr.simulator.des import DesOptions, simulate_flows, simulate_writes
from sdr.simulator.link import Link
from sdr.simulator.loss import Bernoulli
from sdr.simulator.schemes import SchemeSpec

MIB = 1 << 20


# --- config ---------------------------------------------------------------------------
def test_config_takes_a_controller_by_name_and_from_toml() -> None:
    assert ReliabilityConfig().congestion == "fixed"
    assert ReliabilityConfig(congestion="DELAY").congestion == "delay"
    config = loads(
        '[reliability]\ncongestion = "bbr"\n[reliability.congestion_params]\nmax_rate = 2e9\n'
    )
    assert config.congestion == "bbr" and config.congestion_params == {"max_rate": 2e9}


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"congestion": "vegas"}, "congestion 'vegas' is not a known congestion controller"),
        ({"congestion": 3}, "congestion 3 is not a known"),
        ({"congestion_params": [1]}, "congestion_params must be a table"),
    ],
)
def test_config_refuses_a_bad_controller_in_one_line(changes, words) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        ReliabilityConfig(**changes)
    assert "\n" not in str(info.value)


def test_the_controller_follows_the_config() -> None:
    attr = sdr.QPAttr(rate_limit=1e9)
    assert congestion_controller(ReliabilityConfig(), attr) is None  # fixed: the QP paces
    cc = congestion_controller(ReliabilityConfig(congestion="delay"), attr)
    assert isinstance(cc, DelayBased) and cc.pacing_rate == 1e9 and cc.mtu == attr.mtu
    config = ReliabilityConfig(congestion="auto", congestion_params={"max_rate": 4e9})
    assert isinstance(congestion_controller(config, sdr.QPAttr()), BbrLike)  # no rate: bbr
    with pytest.raises(ConfigError, match="needs a rate to start from: set the QP's rate_limit"):
        congestion_controller(ReliabilityConfig(congestion="delay"), sdr.QPAttr())
    with pytest.raises(ConfigError, match="'delay'.*unexpected keyword argument 'gain'"):
        congestion_controller(
            ReliabilityConfig(congestion="delay", congestion_params={"gain": 2}), attr
        )


# --- the scheme's signals -------------------------------------------------------------
def _sender(length: int = 10 * 4096, **changes):
    config = ReliabilityConfig(rtt=0.01, chunk_size=4096, link_rate=1e9, **changes)
    sender = create_scheme(config).sender(0, memoryview(bytearray(length)))
    sender.start(0.0)
    sender.actions()
    return sender


def _have(first: int, n: int) -> np.ndarray:
    """The arrival mask of chunks [0, first) of n."""
    return np.arange(n) < first


def test_a_sack_reports_the_newly_acked_bytes_with_a_karn_rtt() -> None:
    sender = _sender(9 * 4096 + 100)  # a short last chunk
    sender.on_sent(0.001, 0, np.arange(0, 5))
    sender.on_sent(0.002, 0, np.arange(5, 10))
    sender.on_control(0.0125, Sack.build(0, _have(10, 10), digest_ok=True))
    [signal] = [a for a in sender.actions() if isinstance(a, Delivered)]
    assert signal.nbytes == 9 * 4096 + 100
    assert signal.rtt_s == pytest.approx(0.0105)  # the newest chunk sent once: 0.002
    sender.on_control(0.02, Sack.build(0, _have(10, 10), digest_ok=True))
    assert not [a for a in sender.actions() if isinstance(a, Delivered)]  # nothing new


def test_the_sacks_ack_delay_comes_off_the_rtt_sample_at_most_our_ack_interval() -> None:
    # The controller's sample loses the receiver's hold, at most our ack_interval and never
    # going below the smallest sample seen (QUIC's rule); the RTO's estimator keeps the
    # hold (the acknowledgement comes that much later)
    cases = [(0.0025, 0.002, 0.0115), (0.0025, 0.5, 0.011), (0.0025, 0.0, 0.0135)]
    cases += [(0.01, 0.004, 0.0135)]  # 13.5 - 4 would be below the 10.5 ms seen: kept
    for interval, reported, sample in cases:
        sender = _sender(ack_interval=interval)
        sender.on_sent(0.001, 0, np.arange(0, 5))
        sender.on_control(0.0115, Sack.build(0, _have(5, 10), True))  # min RTT 10.5 ms
        sender.on_sent(0.002, 0, np.arange(5, 10))
        sender.on_control(0.0155, Sack.build(0, _have(10, 10), True, ack_delay=reported))
        first, second = [a for a in sender.actions() if isinstance(a, Delivered)]
        assert first.rtt_s == pytest.approx(0.0105)  # the first sample: nothing below it
        assert second.rtt_s == pytest.approx(sample), reported
        assert sender.rtt.srtt == pytest.approx(0.875 * 0.0105 + 0.125 * 0.0135)
    sender = _sender(ack_interval=0.0025)  # a first sample is taken as it is
    sender.on_sent(0.010, 0, np.arange(0, 10))
    sender.on_control(0.0115, Sack.build(0, _have(10, 10), True, ack_delay=0.002))
    [signal] = [a for a in sender.actions() if isinstance(a, Delivered)]
    assert signal.rtt_s == pytest.approx(0.0015)


def test_the_receivers_sack_says_how_long_ago_the_latest_data_arrived() -> None:
    config = ReliabilityConfig(
        rtt=0.01, chunk_size=4096, link_rate=1e9, scheme="sr-nack", ack_interval=0.0025
    )
    receiver = create_scheme(config).receiver(0, memoryview(bytearray(10 * 4096)))
    receiver.on_chunks(0.001, 0, np.arange(0, 4))
    receiver.on_chunks(0.002, 0, np.arange(4, 6))
    assert receiver.next_timer() == pytest.approx(0.001 + 0.0025)  # the SACK's timer
    receiver.handle_timer(0.0035)
    sent = [getattr(a, "message", None) for a in receiver.actions()]
    [sack] = [m for m in sent if isinstance(m, Sack)]
    assert sack.ack_delay == pytest.approx(0.0015) and sack.cum == 6


def test_a_retransmitted_chunk_gives_no_rtt_and_its_loss_is_reported() -> None:
    sender = _sender()
    sender.on_sent(0.001, 0, np.arange(0, 10))
    sender.handle_timer(sender.next_timer())  # every chunk's RTO, the receiver silent:
    [lost] = [a for a in sender.actions() if isinstance(a, Lost)]  # PROBE_CHUNKS resent
    assert lost.nbytes == PROBE_CHUNKS * 4096 and lost.sent_at == pytest.approx(0.001)
    sender.on_sent(0.05, 0, np.arange(0, 10))
    sender.on_control(0.06, Sack.build(0, _have(3, 10), digest_ok=True))
    [signal] = [a for a in sender.actions() if isinstance(a, Delivered)]
    assert signal.nbytes == 3 * 4096 and signal.rtt_s is None  # Karn: sent twice


# --- the connection -------------------------------------------------------------------
def _transfer(wire: Wire, sizes: list[int]) -> list[np.ndarray]:
    """Writes of ``sizes`` from side a to side b over ``wire``: every one completes, and
    every byte arrives; returns the sources."""
    a, b = wire.sides
    srcs = [_payload(n, seed=i) for i, n in enumerate(sizes)]
    dsts = [np.zeros_like(s) for s in srcs]
    for d in dsts:
        b.conn.post_recv(wire.now, _register(d))
    for s in srcs:
        a.conn.post_write(wire.now, _register(s))
    done: list[object] = []
    wire.run(lambda: done.extend(a.events()) or len(done) == len(srcs))
    assert [type(e) for e in done] == [WriteCompleted] * len(srcs)
    assert all(np.array_equal(s, d) for s, d in zip(srcs, dsts, strict=True))
    return srcs


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack", "ec-mds"])
@pytest.mark.parametrize("controller", ["delay", "bbr"])
def test_writes_complete_intact_and_the_books_balance(scheme, controller) -> None:
    a, b = Side(scheme, congestion=controller), Side(scheme, congestion=controller)
    srcs = _transfer(Wire(a, b, loss=0.02, seed=3), [300_000, 70_000])
    cc = a.conn.controller
    assert cc is not None and cc.in_flight == 0  # every byte sent was acked or lost
    assert cc.delivered >= sum(len(s) for s in srcs)
    # SR: SACKs as the data arrives; EC: the final ACK of a write it did not repair
    assert math.isfinite(cc.min_rtt) and cc.min_rtt >= 1e-4  # one wire round
    if scheme.startswith("sr"):
        assert cc.lost > 0  # 2% of the packets were dropped and retransmitted
    assert a.conn.pacing_rate == cc.pacing_rate


def _windowed_burst(rtt: float, sample: float) -> tuple[int, int]:
    """Packets a fresh 1 MiB sr-rto write may send at once after three RTT samples of
    ``sample`` s (configured ``rtt``), and the window in packets the connection allowed.
    The window counts whole chunks (the receiver acknowledges nothing less): the chunk
    the window ends in leaves whole, then nothing more."""
    a = Side("sr-rto", rtt=rtt, congestion="delay")
    cc = a.conn.controller
    assert cc is not None
    for _ in range(3):  # min RTT known (a median of three samples): a finite window
        cc.on_sent(0.0, 1024)
        cc.on_ack(sample, 1024, rtt_s=sample)
    window = max(cc.cwnd, cc.pacing_rate / 8 * a.conn.config.rto)
    b = Side("sr-rto")
    b.conn.post_recv(0.0, _register(np.zeros(MIB, dtype=np.uint8)))
    for data in b.conn.core.actions_to_do():  # the CTS
        if hasattr(data, "data"):
            a.conn.receive_control(0.0, data.data)
    a.conn.post_write(0.0, _register(_payload(MIB, seed=1)))
    sent = sum(len(batch) for batch in a.conn.writes_to_send(0.0, 1 << 16))
    sent += sum(len(batch) for batch in a.conn.writes_to_send(0.0, 1 << 16))  # its last chunk
    assert sum(len(batch) for batch in a.conn.writes_to_send(0.0, 1 << 16)) == 0  # full
    assert cc.in_flight == pytest.approx(sent * ATTR.mtu)  # whole chunks
    return sent, int(window // ATTR.mtu)


def _whole_chunks(packets: int) -> int:
    per_chunk = ATTR.chunk_size // ATTR.mtu
    return -(-packets // per_chunk) * per_chunk


def test_the_window_holds_a_selective_repeat_sender_back() -> None:
    # 1 Gbit/s x 1 ms x 2: 244 packets; the RTO floor (1 Gbit/s x 0.3 ms) is smaller
    sent, window = _windowed_burst(rtt=1e-4, sample=1e-3)
    assert 0 < sent == _whole_chunks(window) and window == 244 < MIB // ATTR.mtu


def test_the_window_never_stalls_before_the_rto_could_free_it() -> None:
    # a configured rtt 100x the measured one: the window covers an RTO at the rate
    # (1 Gbit/s x 3 ms: 366 packets), not 2 x the 0.1 ms sample (24 packets)
    sent, window = _windowed_burst(rtt=1e-3, sample=1e-4)
    assert window == 366 and sent == _whole_chunks(window) == 368


def test_erasure_coding_is_paced_by_rate_alone() -> None:
    a = Side("ec-mds", congestion="delay")
    assert a.conn.controller is not None and not a.conn.books.windowed  # one ACK per message


def test_fixed_changes_nothing() -> None:
    a = Side("sr-rto")
    assert a.conn.controller is None and a.conn.pacing_rate is None


# --- the driver and the transports ----------------------------------------------------
def test_the_pacer_keeps_its_tokens_when_the_rate_changes() -> None:
    bucket = TokenBucket(1e6, 1e6)
    bucket.consume(0.0, 1e6)  # empty at 0
    bucket.set_rate(0.5, 2e6)  # 0.5 s at 1 Mbit/s earned 0.5 Mbit
    assert bucket.budget(0.5, 1e5) == 5
    assert bucket.budget(0.75, 1e5) == 10  # then 2 Mbit/s: 0.5 Mbit more by 0.75
    with pytest.raises(ConfigError, match="rate must be > 0"):
        bucket.set_rate(1.0, 0)


def test_the_driver_loop_hands_the_rate_to_the_transport_pacer() -> None:
    pair = make_pair(sdr.QPAttr(rate_limit=1e9, chunk_size=4096, mtu=1024))
    qa = pair.qa
    sender = ReliableQP(qa, "sr-rto", rtt=0.001, congestion="delay")
    cc = sender.connection.controller
    assert isinstance(cc, DelayBased)
    cc._rate = 2e8  # as if the controller had backed off
    sender.progress()
    assert qa.transport_qp.pacer.rate == cc.pacing_rate == 2e8
    pair.close()


# --- the simulator runs the same code -------------------------------------------------
def test_the_des_runs_the_sdk_controller_and_random_loss_costs_it_nothing() -> None:
    link = Link(1e9, 0.025)
    spec, size, loss = SchemeSpec("sr-nack"), 16 * MIB, Bernoulli(1e-2, "packet")
    fixed = simulate_writes(link, size, spec, loss, samples=2, seed=1)
    delay = simulate_writes(
        link, size, spec, loss, samples=2, seed=1, options=DesOptions(congestion="delay")
    )
    assert delay.failed == fixed.failed == 0
    # same losses, same repairs: the controller did not mistake random loss for congestion
    assert delay.times_s == pytest.approx(fixed.times_s, rel=0.05)


def test_the_des_controller_shares_a_queue_with_fewer_drops_than_fixed_pacing() -> None:
    link = Link(1e9, 0.025)  # two flows, each configured at the link's rate, 1 BDP buffer
    runs = {
        cc: simulate_flows(
            link,
            8 * MIB,
            SchemeSpec("sr-rto"),
            None,
            flows=2,
            writes=2,
            seed=1,
            options=DesOptions(queue=3.125e6, copy_payload=True, congestion=cc),
        )
        for cc in ("fixed", "delay")
    }
    assert all(r.correct and r.failed == 0 for flows in runs.values() for r in flows)
    drops = {cc: flows[0].link["a->b"]["queue_drops"] for cc, flows in runs.items()}
    assert drops["delay"] < drops["fixed"] / 2, drops  # 607 against 2,102 (seed 1)


# --- multipath ------------------------------------------------------------------------
PATH_ATTR = sdr.QPAttr(mtu=1024, chunk_size=4096, max_message_size=1 << 20, channels=4)


class BadPathWire(Wire):
    """Channel 2 drops ``bad_loss`` of its packets; the others none."""

    bad_loss = 0.05

    def loss_of(self, batch) -> np.ndarray:
        return np.where(batch.channels == 2, self.bad_loss, 0.0)


def _move_bytes(multipath: bool) -> tuple[Side, BadPathWire, list[np.ndarray]]:
    # rtt: the wire's round trip is a round or two (1e-4 s each) plus the ACK delay
    a = Side("sr-nack", PATH_ATTR, rtt=1e-3, multipath=multipath, congestion="delay")
    b = Side("sr-nack", PATH_ATTR, rtt=1e-3, multipath=multipath)
    wire = BadPathWire(a, b, seed=5)
    return a, wire, _transfer(wire, [1 << 20] * 6)


def test_multipath_moves_traffic_off_a_lossy_path_and_keeps_every_byte() -> None:
    a, wire, _ = _move_bytes(multipath=True)
    selector = a.conn.paths.selector
    assert not selector.stats[2].active  # moved off
    assert all(selector.stats[p].active for p in (0, 1, 3))  # the good ones never
    assert selector.stats[2].loss > 3 * max(selector.stats[p].loss for p in (0, 1, 3))
    shares = np.array([s.sent for s in selector.stats]) / sum(s.sent for s in selector.stats)
    assert shares[2] < 0.15  # a quarter before the move, a trickle after
    sprayed, spray_wire, _ = _move_bytes(multipath=False)
    assert sprayed.conn.paths is None
    assert wire.dropped < spray_wire.dropped / 2  # fewer packets sent into the bad path


def test_a_window_under_a_long_configured_rtt_still_lets_lossy_writes_finish() -> None:
    # rtt configured 10 ms over a wire whose round trip is ~0.1 ms: before the RTO floor,
    # lost chunks held the 2-sample-RTT window until their 30 ms RTO and two of these six
    # writes hit their global timeout
    a = Side("sr-nack", PATH_ATTR, congestion="delay")
    b = Side("sr-nack", PATH_ATTR)
    _transfer(BadPathWire(a, b, seed=5), [1 << 20] * 6)


def test_a_window_smaller_than_a_chunk_does_not_deadlock() -> None:
    # at 1 Mbit/s the RTO floor is 375 B and delay's own window 4 packets: below one
    # 16 KiB chunk, which the receiver acknowledges only whole; before the two-chunk
    # floor the sender stopped with a chunk half sent (found on the emulator)
    attr = sdr.QPAttr(mtu=1024, chunk_size=16384, max_message_size=4 << 20)
    a = Side("sr-nack", attr, congestion="delay", link_rate=1e6)
    b = Side("sr-nack", attr, link_rate=1e6)
    _transfer(Wire(a, b), [1 << 20])


class SmallWindow(CongestionController):
    """A window of three 4 KiB chunks at 1 Mbit/s whatever happens (the RTO floor at that
    rate is 3.75 KB, so the window, not the floor, holds the sender)."""

    name = "small-window"

    @property
    def pacing_rate(self) -> float:
        return 1e6

    @property
    def cwnd(self) -> float:
        return 3 * 4096


def _outstanding_bytes(conn) -> int:
    """Bytes of chunks the senders count as out: sent, not acknowledged, not queued again."""
    out = 0
    for write in conn.writes.sending.values():
        t = write.machine.tracker
        out += write.lanes[0].geometry.chunk_bytes(
            np.flatnonzero((t.sends > 0) & ~t.acked & ~t.queued)
        )
    return out


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack"])
def test_spurious_rtos_do_not_leak_the_window(scheme) -> None:
    # ACKs take 40 ms, longer than the 30 ms RTO (an emulator host under CPU load): the
    # chunks that leave before the first RTT sample are queued again (later ones get the
    # measured RTO), and the window holds the copies back until the first copy's ACK has
    # come. Before, the copy's bytes were counted in flight when it left and never taken
    # off (the chunk was delivered already): the leaks filled the window, the sender
    # stopped for good and every write failed at its global timeout
    a = Side(scheme, congestion="delay")
    b = Side(scheme, congestion="delay")
    a.conn.controller = SmallWindow(1e6, mtu=ATTR.mtu)
    wire = Wire(a, b, loss=0.01, seed=1, control_delay=0.04)
    sizes = [512 << 10] * 3
    srcs = [_payload(n, seed=i) for i, n in enumerate(sizes)]
    dsts = [np.zeros_like(s) for s in srcs]
    for d in dsts:
        b.conn.post_recv(0.0, _register(d))
    for s in srcs:
        a.conn.post_write(0.0, _register(s))
    done: list[object] = []
    books: list[tuple[float, int]] = []

    def finished() -> bool:
        a.conn.writes_to_send(wire.now, 0)  # the machines' verdicts reach the books
        books.append((a.conn.controller.in_flight, _outstanding_bytes(a.conn)))
        done.extend(a.events())
        return len(done) == len(srcs)

    wire.run(finished)
    assert [type(e) for e in done] == [WriteCompleted] * len(srcs), done
    assert all(np.array_equal(s, d) for s, d in zip(srcs, dsts, strict=True))
    assert a.conn.counters["write_repairs_spurious"] > 0  # there were copies to leak
    bad = [(i, c, o) for i, (c, o) in enumerate(books) if c != o]
    assert not bad, (len(books), bad[:10])


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack"])
def test_an_rtt_configured_too_short_is_learned_not_repeated(scheme) -> None:
    # rtt 10 ms (RTO 30 ms) on a path whose ACKs take 40 ms: before, every chunk was
    # queued twice (192 repairs for nothing) and a warning named the setting. The RTO now
    # follows the measured RTT (RFC 6298): only chunks that left before the first sample
    # are repaired for nothing, too few to warn about
    a, b = Side(scheme, congestion="delay"), Side(scheme, congestion="delay")
    a.conn.controller = SmallWindow(1e6, mtu=ATTR.mtu)
    wire = Wire(a, b, control_delay=0.04)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RtoWarning)
        _transfer(wire, [256 << 10] * 3)
    assert 0 < a.conn.counters["write_repairs_spurious"] < 0.1 * 3 * 64
    # ...all of them timed by the configured rtt, before the first sample
    spurious = a.conn.counters["write_repairs_spurious"]
    assert a.conn.counters["write_repairs_spurious_unsampled"] == spurious
    assert a.conn.rtt.rto > 0.04  # it measured the 40 ms round trip


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack"])
def test_repairs_of_real_losses_are_not_called_spurious(scheme) -> None:
    a, b = Side(scheme), Side(scheme)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RtoWarning)
        _transfer(Wire(a, b, loss=0.05, seed=2), [256 << 10] * 3)
    assert a.conn.counters["write_chunks_retransmitted"] > 0  # there were repairs
    assert a.conn.counters["write_repairs_spurious"] == 0  # none for nothing


@pytest.mark.parametrize("congestion", ["fixed", "delay"])
def test_the_deadline_follows_progress(congestion) -> None:
    # two 1 MiB writes need 16 rounds of 0.1 ms each, the second after the first; the
    # global timeout is 1 ms. It bounds a stall of the whole connection, not a write's
    # age: with fixed (a rate shared between writes) and under a controller (which may
    # pace far below link_rate, and did on the emulator: writes failed with nothing
    # lost, the later ones before a packet of theirs had left) both complete
    cfg = {"congestion": congestion, "global_timeout": 1e-3, "ack_interval": 2e-4}
    a, b = Side("sr-rto", **cfg), Side("sr-rto", **cfg)
    wire = Wire(a, b)
    srcs = [_payload(1 << 20, seed=i) for i in (2, 3)]
    dsts = [np.zeros(1 << 20, dtype=np.uint8) for _ in srcs]
    for d in dsts:
        b.conn.post_recv(0.0, _register(d))
    for src in srcs:
        a.conn.post_write(0.0, _register(src))
    done: list[object] = []
    wire.run(lambda: done.extend(a.events() + b.events()) or len(done) == 4)
    assert (
        sorted(type(e).__name__ for e in done) == ["ReceiveCompleted"] * 2 + ["WriteCompleted"] * 2
    )
    assert all(np.array_equal(s, d) for s, d in zip(srcs, dsts, strict=True))


def test_multipath_is_refused_when_it_is_not_a_bool() -> None:
    with pytest.raises(ConfigError, match="multipath must be true or false, got 'yes'"):
        ReliabilityConfig(multipath="yes")


def test_a_channel_picker_that_returns_nonsense_is_a_clear_error() -> None:
    core = sdr.QueuePairCore(PATH_ATTR)
    core.choose_channels_with(lambda rec, packets, now: np.full(len(packets), 9))
    with pytest.raises(ConfigError, match=r"expected one channel in \[0, 4\) per packet"):
        core.send._channels(None, np.arange(3), 0.0)
