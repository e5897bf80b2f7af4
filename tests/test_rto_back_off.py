"""The RTO's back-off ends when the path answers, and a dark path gives no RTT sample.

A reliable DiLoCo step once took 46.5 s through a 2 s blackout. Played here on fake
clocks (sans-I/O), three things each kept a write waiting long after the path was back:
a silent timeout re-armed the rest of the window with the backed-off RTO and an answer
did not bring those timers back; an acknowledgement that the blackout had held back
timed a chunk as if the path took 2 s (the estimator's RTO went from 75 ms to 7 s); and
one write's back-off ignored that the path answered its other writes.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_reliable_connection import Side, Wire, _payload, _register

from sdr.reliability import ReliabilityConfig, WriteCompleted
from sdr.reliability.base import Lane, SendChunks
from sdr.reliability.messages import decode_message, is_reliability_message
from sdr.reliability.registry import create_scheme
from sdr.reliability.repair_messages import Sack

CHUNK = 4096
N_CHUNKS = 64


def _sender(scheme: str = "sr-nack", first: int = N_CHUNKS):
    """A sender whose first ``first`` chunks left at 0 (the rest wait in its queue)."""
    config = ReliabilityConfig.coerce(scheme, rtt=0.025, global_timeout=180.0)
    machine = create_scheme(config.resolved(CHUNK, 1e9)).sender(
        0, memoryview(bytes(N_CHUNKS * CHUNK))
    )
    machine.start(0.0)
    _send_what_it_queues(machine, 0.0, first)
    return machine


def _send_what_it_queues(machine, now: float, first: int = N_CHUNKS) -> None:
    for action in machine.actions():
        if isinstance(action, SendChunks) and action.lane == Lane.DATA:
            machine.on_sent(now, action.lane, action.chunks[action.chunks < first])


def _dark_until(machine, end: float) -> None:
    """Nothing comes back until ``end``: the machine's timers fire, its sends are lost."""
    while (deadline := machine.next_timer()) is not None and deadline < end:
        machine.handle_timer(deadline)
        _send_what_it_queues(machine, deadline)


def _sack(cum: int) -> Sack:
    return Sack(0, cum, np.zeros(0, dtype=bool))


def test_an_answer_brings_every_backed_off_chunk_timer_back() -> None:
    machine = _sender()
    _dark_until(machine, 2.0)
    assert machine.rto > 8 * machine.rtt.rto  # backed off through the blackout
    machine.on_control(2.0, _sack(2))  # the first answer after it
    assert machine.rto == machine.rtt.rto
    # the chunks still out are timed by the path's RTO again, not the backed-off one
    # (before: the rest of the window waited out the back-off, 2.325 s here, tens of
    # seconds where the RTO is larger; the probe timer does not resend them)
    assert machine.tracker.next_deadline() <= 2.0 + machine.rtt.rto


def test_an_answer_that_also_covers_a_later_resend_gives_no_rtt_sample() -> None:
    # it may answer the resend (a probe's, after the dark), not the first copies it also
    # covers: they had arrived before the dark, and their acknowledgements were lost
    machine = _sender()
    machine.rtt.sample(0.025)  # the connection has run: its RTT is known
    _dark_until(machine, 2.0)
    once = np.flatnonzero(machine.tracker.sends == 1)
    assert len(once)  # chunks that left once, before the dark, and were never resent
    machine.on_control(2.0, _sack(N_CHUNKS))  # held back by the blackout, they arrive
    assert machine.tracker.acked.all()
    # 2 s is not the path's RTT: before, it moved SRTT, and on a fresh estimator the RTO
    # read 7 s
    assert machine.rtt.srtt == 0.025 and machine.rtt.samples == 1


def test_a_chunk_first_sent_after_the_dark_is_sampled() -> None:
    # silent timeouts do not stop sampling: the newest first copy an answer covers times
    # the path (a rule that left out every chunk sent before a silent timeout never
    # sampled a path slower than a configured rtt of 50 us: 362 of 512 chunks went twice)
    machine = _sender(first=N_CHUNKS // 2)  # the second half waits (a slow pacer)
    _dark_until(machine, 2.0)
    assert machine.tracker.queued[N_CHUNKS // 2 :].all()
    machine.on_sent(2.001, Lane.DATA, np.arange(N_CHUNKS // 2, N_CHUNKS))
    machine.on_control(2.026, _sack(N_CHUNKS))
    assert machine.rtt.srtt is not None and abs(machine.rtt.srtt - 0.025) < 1e-9


def _to_sender_about(seq: int, data: bytes) -> bool:
    if not is_reliability_message(data):
        return False
    message = decode_message(data)
    return getattr(message, "seq", None) == seq and type(message).TO_SENDER


def test_a_sample_of_another_write_ends_a_writes_back_off() -> None:
    """Write 0 hears nothing for 0.5 s (every answer about it lost) and backs off; then
    write 1 starts, and its RTT samples show the path is there: write 0 stops backing
    off and asks again within an RTO, instead of waiting out its back-off (its next probe
    came at 0.79 s before)."""
    a, b = Side("sr-nack", rtt=0.01), Side("sr-nack", rtt=0.01)
    quiet_until = 0.5
    wire = Wire(a, b, control_delay=0.005, drop_control=lambda data, index: wire.now
                < quiet_until and _to_sender_about(0, data))  # fmt: skip
    srcs = [_payload(64 * CHUNK, seed=s) for s in (1, 2)]
    dsts = [np.zeros_like(s) for s in srcs]
    for dst in dsts:
        b.conn.post_recv(wire.now, _register(dst))
    a.conn.post_write(wire.now, _register(srcs[0]))
    done: dict[int, float] = {}

    def note() -> None:
        for event in a.events():
            assert isinstance(event, WriteCompleted)
            done[event.seq] = wire.now

    wire.run(lambda: note() or wire.now >= quiet_until)
    assert not done  # write 0 is still waiting for an answer
    [out] = a.conn.writes.sending.values()
    assert out.machine.rto > 8 * a.conn.rtt.rto  # and backed off
    a.conn.post_write(wire.now, _register(srcs[1]))
    wire.run(lambda: note() or len(done) == 2)
    assert done[0] < quiet_until + 0.1, done
    for src, dst in zip(srcs, dsts, strict=True):
        assert np.array_equal(src, dst)


class _Blackout(Wire):
    """Every packet, data and control, is lost while ``now`` is in ``[start, end)``."""

    def __init__(self, a: Side, b: Side, start: float, end: float, **kwargs: object) -> None:
        super().__init__(a, b, drop_control=lambda data, index: self.dark(), **kwargs)
        self.start, self.end = start, end

    def dark(self) -> bool:
        return self.start <= self.now < self.end

    def loss_of(self, batch) -> float:
        return 1.0 if self.dark() else 0.0


@pytest.mark.parametrize("ack_interval", [None, 0.0125])
def test_writes_caught_by_a_blackout_finish_soon_after_it(ack_interval: float | None) -> None:
    """Four 1 MiB writes at 25 ms RTT; the path goes dark for 2 s as their first chunks
    leave (the clear-to-sends came at 12.5 ms). Before: the last write finished at 4.76 s
    and the connection's RTO read 2.68 s (acknowledgements of chunks that arrived just
    before the dark timed them as 2 s, and a back-off was waited out); now 2.45-2.55 s,
    RTO 75 ms. With a SACK every 12.5 ms (``ack_interval``, rtt/2) they finished at 11 and
    15 s: the timers the answer to a probe brought back expired one RTO after it, which
    read as silence again, so each RTO let only a probe's worth of chunks go."""
    extra = {} if ack_interval is None else {"ack_interval": ack_interval}
    a, b = Side("sr-nack", rtt=0.025, **extra), Side("sr-nack", rtt=0.025, **extra)
    a.conn.rtt.sample(0.025)  # a connection that has run (a training job's earlier steps)
    start, end = 0.013, 2.013
    wire = _Blackout(a, b, start, end, control_delay=0.0125)
    srcs = [_payload(1 << 20, seed=s) for s in range(4)]
    dsts = [np.zeros_like(s) for s in srcs]
    for src, dst in zip(srcs, dsts, strict=True):
        b.conn.post_recv(wire.now, _register(dst))
        a.conn.post_write(wire.now, _register(src))
    done: dict[int, float] = {}

    def note() -> bool:
        for event in a.events():
            assert isinstance(event, WriteCompleted)
            done[event.seq] = wire.now
        return len(done) == len(srcs)

    wire.run(note, rounds=100_000)
    assert max(done.values()) < end + 0.6, done
    assert a.conn.rtt.rto < 0.2
    for src, dst in zip(srcs, dsts, strict=True):
        assert np.array_equal(src, dst)
