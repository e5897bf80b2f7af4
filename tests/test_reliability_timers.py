"""Timers of a reliable connection: a no-progress timeout, RTO back-off, probes (sans-I/O).

A receiver descheduled for 2.5 s (SIGSTOP, a GC pause) once data flows used to fail a
transfer whose user asked for 60 s ("not acknowledged within the global timeout of
1.54 s"), while the sender resent the whole window every RTO (2,329 chunks in 1.5 s).
Here the pause is played on the fake clock of the hand-driven wire: while the receiver
is paused, everything sent to it is lost (its socket overflowed) and it sends nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_reliable_connection import Side, Wire, _payload, _register

from sdr.reliability import MessageFailedEvent
from sdr.reliability.messages import Digest, decode_message, is_reliability_message
from sdr.reliability.rtt_estimator import RttEstimator
from sdr.reliability.sr_sender import PROBE_CHUNKS, max_rto

PAUSE_S = 2.5
SIZE = 1 << 20  # 256 chunks of 4 KiB


class PausingWire(Wire):
    """A wire whose receiver (side b) is paused for ``pause`` s, from the round in which
    the sender first hears that chunks arrived (forever with ``pause=None``)."""

    def __init__(self, a: Side, b: Side, pause: float | None) -> None:
        super().__init__(a, b)
        self.pause = pause
        self.paused_at: float | None = None
        self.resent_while_paused = 0  # chunks the sender retransmitted meanwhile
        self._sender = None
        self._resent_before = 0

    def paused(self) -> bool:
        if self.paused_at is None:
            return False
        return self.pause is None or self.now < self.paused_at + self.pause

    def round(self) -> None:
        a, b = self.sides
        if self.paused_at is None and np.isfinite(a.conn.progress_at):
            self.paused_at = self.now  # the gate: data flows, some of it acknowledged
            [out] = a.conn.writes.sending.values()
            self._sender = out.machine.tracker
            self._resent_before = self._sender.retransmissions
        if not self.paused():
            super().round()
            return
        a.conn.writes_to_send(self.now, 64)  # lost: the receiver does not read
        self.resent_while_paused = self._sender.retransmissions - self._resent_before
        a.carry_out()
        a.outbox.clear()
        self.now += 1e-4
        deadline = a.conn.get_timer()
        if deadline is not None and deadline <= self.now:
            a.conn.handle_timer(self.now)


def _write(wire: Wire, events: int = 2) -> tuple[list[object], np.ndarray, np.ndarray]:
    a, b = wire.sides
    src, dst = _payload(SIZE, seed=7), np.zeros(SIZE, dtype=np.uint8)
    b.conn.post_recv(wire.now, _register(dst))
    a.conn.post_write(wire.now, _register(src))
    done: list[object] = []
    wire.run(lambda: done.extend(a.events() + b.events()) or len(done) == events)
    return done, src, dst


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack"])
def test_a_paused_receiver_does_not_fail_a_transfer_that_may_take_60_s(scheme) -> None:
    config = {"rtt": 0.001, "global_timeout": 60.0}
    a, b = Side(scheme, **config), Side(scheme, **config)
    wire = PausingWire(a, b, pause=PAUSE_S)
    done, src, dst = _write(wire)
    assert sorted(type(e).__name__ for e in done) == ["ReceiveCompleted", "WriteCompleted"]
    assert np.array_equal(src, dst)
    assert wire.paused_at is not None and wire.now > wire.paused_at + PAUSE_S
    # back-off: each silent timeout doubles the RTO (3 ms, 6 ms, ... up to 15 s) and
    # resends PROBE_CHUNKS chunks; about 10 timeouts in 2.5 s. Before: the whole
    # unacknowledged window every RTO, thousands of chunks
    timeouts = int(np.ceil(np.log2(PAUSE_S / a.conn.config.rto))) + 1
    assert 0 < wire.resent_while_paused <= 2 * timeouts * PROBE_CHUNKS


@pytest.mark.parametrize("scheme", ["sr-rto", "sr-nack"])
def test_a_dead_receiver_fails_the_write_after_the_timeout_without_progress(scheme) -> None:
    config = {"rtt": 0.001, "global_timeout": 2.0}
    a, b = Side(scheme, **config), Side(scheme, **config)
    wire = PausingWire(a, b, pause=None)
    done, _, _ = _write(wire, events=1)  # the receiver, paused for good, says nothing
    [failed] = [e for e in done if isinstance(e, MessageFailedEvent)]
    assert failed.kind == "write"
    text = str(failed.error)
    assert "chunks acknowledged" in text and "no progress for 2" in text, text
    assert "(the global timeout is 2 s)" in text
    acked = int(text.split(": ", 1)[1].split(" of ")[0])
    assert 0 < acked < SIZE // 4096  # what arrived before the receiver died
    assert wire.now >= a.conn.progress_at + 2.0  # it waited the whole timeout


def test_the_message_names_a_missing_final_acknowledgement() -> None:
    # every chunk acknowledged, then the receiver falls silent before its final ACK:
    # before, "0 of 16 chunks unacknowledged" read as if nothing were wrong
    a = Side("sr-rto", rtt=0.001, global_timeout=0.5)
    b = Side("sr-rto", rtt=0.001, global_timeout=5.0)  # the sender gives up first
    # the receiver never sees a checksum (DIGEST), so it acknowledges every chunk's
    # arrival but never the message
    wire = Wire(a, b, drop_control=lambda data, index: isinstance(_decoded(data), Digest))
    src, dst = _payload(16 * 4096, seed=3), np.zeros(16 * 4096, dtype=np.uint8)
    b.conn.post_recv(0.0, _register(dst))
    a.conn.post_write(0.0, _register(src))
    done: list[object] = []
    wire.run(lambda: done.extend(a.events()) or bool(done))
    [failed] = done
    assert isinstance(failed, MessageFailedEvent)
    assert "16 of 16 chunks acknowledged (all; not the final acknowledgement)" in str(failed.error)


def _decoded(data: bytes) -> object:
    return decode_message(data) if is_reliability_message(data) else None  # not a CTS


def test_the_rtt_estimator_follows_rfc_6298() -> None:
    est = RttEstimator(floor=0.003, max_rto=1.0)
    assert est.rto == 0.003  # no sample: the configured RTO
    est.sample(0.04)
    assert est.srtt == 0.04 and est.rttvar == 0.02 and est.rto == pytest.approx(0.12)
    est.sample(0.04)
    assert est.srtt == pytest.approx(0.04) and est.rttvar == pytest.approx(0.015)
    for _ in range(200):
        est.sample(0.0001)
    assert est.rto == 0.003  # never below the floor
    est.sample(100.0)
    assert est.rto == 1.0  # nor above max_rto
    est.sample(float("nan"))
    est.sample(-1.0)
    assert est.rto == 1.0  # nonsense is ignored


def test_the_backed_off_rto_is_bounded_by_the_timeout() -> None:
    assert max_rto(60.0) == 15.0
    assert max_rto(1e6) == 60.0
