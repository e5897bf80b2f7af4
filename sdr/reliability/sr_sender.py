"""Selective Repeat, sender side: stream every chunk, retransmit what is not acknowledged.

Per-chunk RTO = rtt + alpha * rtt, counted from the chunk's departure (after pacing).
SACKs acknowledge chunks; NACKs (holes seen by the receiver, failed checksums) and EC
NACKs make the sender retransmit at once. Liveness when the receiver falls silent (lost
ACKs, lost final ACK): a PROBE goes out one RTO after the last activity (a departure or
a message from the receiver) and with every RTO retransmission (retransmitted chunks the
receiver already had change nothing it could report). The receiver answers a PROBE with
its state; a NACK for a chunk retransmitted less than an RTO ago is ignored (the answer
may predate the retransmission; its RTO covers a second loss).

Timers as TCP's (RFC 6298) and QUIC's PTO (RFC 9002): the RTO follows the measured RTT
(:class:`~sdr.reliability.rtt_estimator.RttEstimator`, never below rtt + alpha * rtt);
each timeout while the receiver is silent doubles it, up to ``max_rto`` = min(60 s, T/4),
and, when the receiver acknowledges as chunks arrive (SR), resends only :data:`PROBE_CHUNKS`
of the chunks that are due, re-arming all the others on one timer (they wait for the
receiver's answer: a paused receiver is not flooded with the whole window). The global
timeout T is a no-progress timeout: the message fails with sdr.TimeoutError (and tells the
receiver, ABORT) only when no chunk was newly acknowledged for T seconds.

Every SACK, NACK and EC_NACK is clipped to this message before it is expanded (whoever
the driver is), so one costs O(its bytes) plus at most one vectorized pass over the
message's chunks, however its ranges repeat or overlap.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sdr.errors import MessageFailed, TimeoutError
from sdr.reliability.base import (
    Delivered,
    Lane,
    Lost,
    Scheme,
    SchemeSender,
    SendChunks,
    earliest,
)
from sdr.reliability.chunk_tracker import ChunkTracker
from sdr.reliability.integrity import DigestBuilder
from sdr.reliability.messages import Abort, Ack, ControlMessage, EcNack, Nack, Probe, Sack
from sdr.reliability.rtt_estimator import RttEstimator

__all__ = ["SelectiveRepeatSender", "CRC_STEP_CHUNKS", "PROBE_CHUNKS", "max_rto"]

CRC_STEP_CHUNKS = 16
"""Chunks checksummed per work step (1 MiB at 64 KiB chunks, ~0.3 ms)."""

PROBE_CHUNKS = 2
"""Chunks resent by a timeout while the receiver is silent (the rest wait for its answer)."""

_MAX_RTO_S = 60.0


def max_rto(timeout: float) -> float:
    """The longest the backed-off RTO grows: min(60 s, a quarter of the no-progress
    timeout), so that a silent receiver is probed at least four times before it fails."""
    return min(_MAX_RTO_S, timeout / 4)


class SelectiveRepeatSender(SchemeSender):
    """SR sender of one message (also the repair engine of Erasure Coding)."""

    arm_first_send: ClassVar[bool] = True
    """Arm an RTO when a chunk first leaves (SR); EC arms only retransmissions."""

    def __init__(self, scheme: Scheme, seq: int, data: memoryview) -> None:
        super().__init__(scheme, seq, data)
        self.n_chunks = self.geometry.n_chunks
        self.tracker = ChunkTracker(self.n_chunks)
        self._unsampled = np.zeros(self.n_chunks, dtype=bool)
        """Chunks whose RTO timer was armed before the connection had an RTT sample
        (timed by the configured ``rtt`` alone, when it fires after the first sample too)."""
        self.digest = DigestBuilder(seq, data, self.geometry, scheme.fingerprint)
        self.digest_ok = False
        self.started = False
        self._deadline = np.inf
        self._last_digest = -np.inf
        self._last_probe = -np.inf
        self._last_heard = -np.inf
        self._last_control = -np.inf  # last message from the receiver
        self._last_backoff = -np.inf
        self._backoff = 1
        self.timeout = self.config.timeout_for(self.geometry.length)
        """T: how long the message may go without progress before it fails."""
        self.progress_at = -np.inf
        """When a chunk was last newly acknowledged (or the message started)."""
        self.max_rto = max(max_rto(self.timeout), self.config.rto)
        self.rtt: RttEstimator = RttEstimator(self.config.rto, self.max_rto)

    @property
    def rto(self) -> float:
        """The current RTO: the estimator's (SRTT + 4 RTTVAR, at least rtt * (1 + alpha)),
        doubled per silent timeout, at most ``max_rto``."""
        return min(self.rtt.rto * self._backoff, self.max_rto)

    # --- events -------------------------------------------------------------------------
    def start(self, now: float) -> None:
        self.started = True
        self.progress_at = now
        self._deadline = now + self.timeout
        self._last_heard = now
        self.initial_sends(now)

    def initial_sends(self, now: float) -> None:
        """Queue the first transmission of the message (SR: every data chunk, in order)."""
        self.queue_chunks(Lane.DATA, np.arange(self.n_chunks, dtype=np.int64))

    def has_work(self) -> bool:
        return self.active and self.started and not self.digest.done

    def do_work(self, now: float) -> None:
        # keep the checksums up with the data that already left (an unpaced sender may
        # put a whole message on the wire in one round)
        behind = int((self.tracker.sends > 0).sum()) - self.digest.computed
        # a one-chunk message's data goes out small_copies times: its checksum too, or
        # one lost DIGEST costs the round trip of a SACK and a resend (1e-2 of the
        # deadline allreduce's notes on a lossy WAN, a whole RTT each)
        copies = self.config.small_copies if self.n_chunks == 1 else 1
        for piece in self.digest.step(max(CRC_STEP_CHUNKS, behind)):
            for _ in range(copies):
                self.send(piece)
            self._last_digest = now

    def on_sent(self, now: float, lane: int, chunks: np.ndarray) -> None:
        self._last_heard = max(self._last_heard, now)
        if lane != Lane.DATA or not self.active:
            return
        first = self.tracker.sends[chunks] == 0
        if not first.all():
            self.count("chunks_retransmitted", int((~first).sum()))
        self.tracker.sent(now, chunks, None)
        arm = chunks if self.arm_first_send else chunks[~first]
        self.tracker.arm(now, arm, self.rto)
        self._arm_timed(arm)

    def on_control(self, now: float, message: ControlMessage) -> None:
        if not self.active:
            return
        self._last_heard = self._last_control = now
        self._on_control(now, message)
        # after the message: the timers it brings back take the RTO of the sample it
        # gave (before, a short configured one: repairs for nothing)
        self.end_back_off(now)

    def _on_control(self, now: float, message: ControlMessage) -> None:
        if isinstance(message, Ack):
            if message.failed:
                self.finish(
                    MessageFailed(
                        f"write seq {self.seq}: the receiver gave the message up (its global "
                        "timeout, a checksum or protocol error); see the receiver's error"
                    )
                )
            else:
                self.finish(None)
        elif isinstance(message, Sack):
            fresh = self.tracker.ack(message.clipped(self.n_chunks).acked())
            early = fresh[self.tracker.queued[fresh]]  # their repairs still wait to leave:
            if len(early):  # the first copies had arrived, the RTO fired too soon
                self.count("repairs_spurious", len(early))
                if unsampled := int(self._unsampled[early].sum()):  # timed by the config
                    self.count("repairs_spurious_unsampled", unsampled)
            self.delivered(now, fresh, message.ack_delay)
            self.digest_ok = self.digest_ok or message.digest_ok
            if not message.digest_ok:
                self.resend_digest(now)
        elif isinstance(message, Nack | EcNack):
            if isinstance(message, EcNack):
                self.digest_ok = self.digest_ok or message.digest_ok
            self.count(f"received_{type(message).__name__.lower()}")
            self.repair(now, message.clipped(self.n_chunks).chunks())
        else:
            self.count("ignored_control")

    def repair(self, now: float, chunks: np.ndarray) -> None:
        """Retransmit chunks the receiver asked for, unless one is already on its way.

        ``chunks`` may hold repeats and indices outside the message (ignored): each chunk
        is queued at most once, at the cost of one pass over ``chunks`` plus, when they are
        not sorted and distinct already, one over a mask of the message's chunks.
        """
        chunks = np.asarray(chunks, dtype=np.int64)
        chunks = chunks[(chunks >= 0) & (chunks < self.n_chunks)]
        if len(chunks) > 1 and not (chunks[1:] > chunks[:-1]).all():
            wanted = np.zeros(self.n_chunks, dtype=bool)
            wanted[chunks] = True
            chunks = np.flatnonzero(wanted)
        self.tracker.unack(chunks)
        age = now - self.tracker.last_sent[chunks]
        repaired = (self.tracker.sends[chunks] > 1) & (age < self.rto)
        self.retransmit(chunks[~repaired & (age >= self.config.rtt / 2)])

    # --- timers -------------------------------------------------------------------------
    def hold_deadline(self, until: float) -> None:
        if np.isfinite(self._deadline):  # armed (the receiver's, by the first chunk)
            self._deadline = max(self._deadline, until)

    def progressed(self, now: float) -> None:
        """A chunk was newly acknowledged: the no-progress timeout starts again."""
        self.progress_at = now
        self.hold_deadline(now + self.timeout)

    def next_timer(self) -> float | None:
        if not self.active or not self.started:
            return None
        probe = None if self._queued() else self._last_heard + self.rto
        return earliest(self._deadline, self.tracker.next_deadline(), probe)

    def _queued(self) -> bool:
        """Chunks of ours wait in the driver's queue: the receiver cannot have answered
        for them, and their departure restarts the silence timer (a message queued
        behind others probed every RTO until it left: 20 probes per 16 MiB piece of a
        file at 1 Gbit/s, each answered by a SACK)."""
        return self.tracker.any_queued()

    def handle_timer(self, now: float) -> None:
        if not self.active or not self.started:
            return
        if now >= self._deadline:
            self.fail_timeout(now)
            return
        due = self.tracker.due(now)
        if len(due):
            self.count("rto_expired", len(due))
            # a receiver that acknowledges as chunks arrive (SR) and said nothing for an
            # RTO is silent (EC's says nothing until a submessage fails: not silence); one
            # that answered our last probe is not, though nothing came since: with no data
            # arriving it has nothing to acknowledge, and the timers its answer brought
            # back expire one RTO after it. Before, that read as silence again: one probe's
            # worth of chunks per RTO after a blackout (4 MiB over 25 ms took 9-13 s, not
            # 0.5 s, with a 12.5 ms SACK interval: tests/test_rto_back_off.py)
            answered = np.isfinite(self._last_probe) and self._last_control >= self._last_probe
            silent = (
                self.scheme.acks_progressively
                and now - self._last_control >= self.rtt.rto
                and not answered
            )
            self.back_off(now)
            if silent:  # probe; the rest wait for the answer, all on one timer
                armed = np.flatnonzero(np.isfinite(self.tracker.deadline))
                self.tracker.arm(now, armed, self.rto)
                self._arm_timed(armed)
                due = due[:PROBE_CHUNKS]
            self.retransmit(due)
            self.probe(now)
        elif now >= self._last_heard + self.rto and not self._queued():  # silence: nothing
            # left to send, nothing heard
            self.probe(now)
            self._last_heard = now
            self.back_off(now)

    def back_off(self, now: float) -> None:
        """Double the RTO if the receiver was silent for a whole RTO (at most once per RTO:
        the many chunk timers of one round are one timeout, not many)."""
        rto = self.rto
        if now - self._last_control >= rto and now - self._last_backoff >= rto:
            if self.rto < self.max_rto:
                self._backoff *= 2
            self._last_backoff = now

    def end_back_off(self, now: float) -> bool:
        """The receiver answered, or the path did (a new RTT sample of any write): the RTO
        is the estimator's again (RFC 6298 5.7), and so is every chunk timer that a silent
        timeout armed with the backed-off one. Before, those waited the back-off out: after
        a 2 s blackout, the rest of a window re-armed at many times the RTO (with the
        sample rule in :meth:`delivered`, the likely cause of one outer step of 46.5 s in
        a training run, reproduced on a hand-driven wire: tests/test_rto_back_off.py)."""
        if self._backoff == 1:
            return False
        self._backoff = 1
        self._arm_timed(self.tracker.pull_in(now + self.rto))
        return True

    def _arm_timed(self, chunks: np.ndarray) -> None:
        """These chunks' timers were just armed: by the configured RTO while the
        connection has no RTT sample (what the RTO warning leaves out when they fire)."""
        self._unsampled[chunks] = self.rtt.srtt is None

    def probe(self, now: float) -> None:
        """Ask the receiver for its state (and resend the digest it may lack)."""
        if now - self._last_probe < self.config.rtt:
            return
        self._last_probe = now
        self.send(Probe(self.seq))
        if not self.digest_ok:
            self.resend_digest(now)

    def fail_timeout(self, now: float) -> None:
        acked = int(self.tracker.acked.sum())
        final = " (all; not the final acknowledgement)" if acked == self.n_chunks else ""
        self.send(Abort(self.seq))
        self.finish(
            TimeoutError(
                f"write seq {self.seq}: {acked} of {self.n_chunks} chunks acknowledged{final}; "
                f"no progress for {now - self.progress_at:.3g} s (the global timeout is "
                f"{self.timeout:.3g} s), {self.tracker.retransmissions} retransmissions"
            )
        )

    # --- helpers ------------------------------------------------------------------------
    def queue_chunks(self, lane: int, chunks: np.ndarray, retransmit: bool = False) -> None:
        """Hand chunks of ``lane`` to the driver's stream (they leave after pacing)."""
        if not len(chunks):
            return
        if lane == Lane.DATA:
            self.tracker.queue(chunks)
        key = "chunks_requeued" if retransmit else f"chunks_sent_lane{int(lane)}"
        self.count(key, len(chunks))
        self._actions.append(SendChunks(int(lane), chunks, retransmit))

    def retransmit(self, chunks: np.ndarray) -> None:
        """Queue data chunks again (those not already queued); those that had left are
        reported lost to the congestion controller."""
        chunks = chunks[~self.tracker.queued[chunks]]
        gone = chunks[self.tracker.sends[chunks] > 0]
        if len(gone):
            sent_at = float(self.tracker.last_sent[gone].min())
            self._actions.append(Lost(self.geometry.chunk_bytes(gone), sent_at, gone))
        self.queue_chunks(Lane.DATA, chunks, retransmit=True)

    def delivered(self, now: float, fresh: np.ndarray, ack_delay: float = 0.0) -> None:
        """Report newly acknowledged chunks, with a Karn RTT sample (see :class:`Delivered`).

        The RTO's estimator takes the sample as measured (the acknowledgement of a chunk
        comes after the receiver's hold, so its timer must cover it); the congestion
        controller gets it less the receiver's ``ack_delay`` (QUIC's
        rule, RFC 9002 section 5.3: at most our own ``ack_interval``, and only where the
        sample stays at least the smallest one seen), the path's own delay."""
        if not len(fresh):
            return
        self.progressed(now)
        # Karn's rule, and more: the sample is the newest first copy among the chunks this
        # message newly acknowledges, and none when it also covers a later resend (then it
        # may answer that resend: after a 2 s blackout, chunks that had arrived just before
        # it, whose acknowledgements the dark path lost, came back covered by the answer
        # to a probe's resend and timed the path as 2 s, lifting its RTO from 75 ms to
        # 2.7 s). Timestamps would tell (TCP's RTTM); without them, no sample
        tracker = self.tracker
        once = fresh[tracker.sends[fresh] == 1]
        if len(once) and tracker.last_sent[once].max() < tracker.last_sent[fresh].max():
            once = once[:0]
        rtt, sample = None, None
        if len(once):
            newest = once[int(np.argmax(self.tracker.last_sent[once]))]
            rtt = now - float(self.tracker.last_sent[newest])
            if rtt > 0:
                self.rtt.sample(rtt)
                held = min(ack_delay, self.config.ack_delay)
                if held > 0 and rtt >= self.rtt.min_rtt + held:
                    rtt -= held
                sample = int(newest)
            else:
                rtt = None
        self._actions.append(Delivered(self.geometry.chunk_bytes(fresh), rtt, fresh, sample))

    def resend_digest(self, now: float) -> None:
        """Send the checksums again, at most once per RTT."""
        if now - self._last_digest < self.config.rtt:
            return
        for piece in self.digest.ready():
            self.send(piece)
        self._last_digest = now
