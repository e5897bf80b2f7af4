"""Selective Repeat, receiver side: watch the chunk bitmap, verify, acknowledge.

Arrivals are coalesced into one SACK per ``ack_interval`` (cumulative ACK plus as much
selective bitmap as fits). With ``nack_holes`` (the ``sr-nack`` scheme) a hole is NACKed
once a later chunk shows it and it stayed a hole for the **reorder window**, and again at
most once per RTO. The window starts at 0 (a single FIFO path never reorders, so a hole
is NACKed at once; an eighth of the RTT with ``multipath``, which reorders by design)
and learns from the holes that filled with their first copy: 1.25x the longest such
wait (RACK's idea, RFC 8985, on the receiving side), at most one RTT.
Multipath makes that matter: chunks sprayed over paths whose queues differ overtake each
other, and without the window each overtaken chunk was NACKed and sent twice. Every chunk is checked
against its CRC-32 from the DIGEST; a chunk that fails is NACKed on its own and checked
again when its retransmission should have landed (duplicates do not change the bitmap,
so the check is timer driven). The message completes, with a positive ACK, only when
every chunk is verified. The global timeout T is a no-progress timeout (armed at the first
sign of the message, moved on by every chunk that newly arrives): no new chunk for T
seconds fails the message with sdr.TimeoutError and tells the sender (ACK with the FAILED
flag).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sdr.errors import MessageFailed, ProtocolError, SDRError, TimeoutError
from sdr.reliability.base import (
    Lane,
    ReopenChunks,
    Scheme,
    SchemeReceiver,
    SealChunks,
    earliest,
)
from sdr.reliability.integrity import DigestStore
from sdr.reliability.messages import Abort, Ack, ControlMessage, Digest, Nack, Probe, Sack

__all__ = ["SelectiveRepeatReceiver"]


class SelectiveRepeatReceiver(SchemeReceiver):
    """SR receiver of one message (also the base of the Erasure Coding receiver)."""

    def __init__(self, scheme: Scheme, seq: int, data: memoryview) -> None:
        super().__init__(scheme, seq, data)
        n = self.n_chunks = self.geometry.n_chunks
        self.nack_holes = scheme.nack_holes
        self.digests = DigestStore(self.geometry, scheme.fingerprint, scheme.describe())
        self.arrived = np.zeros(n, dtype=bool)
        self.verified = np.zeros(n, dtype=bool)
        self.bad = np.zeros(n, dtype=bool)
        self._any_bad = False  # bad.any(), kept by accept / reject (next_timer asks often)
        self.last_nack = np.full(n, -np.inf)
        self.hole_since = np.full(n, np.inf)  # when a later chunk first showed the hole
        self.reorder_window = self.config.rtt / 8 if self.config.multipath else 0.0
        """Seconds a hole waits before its NACK (learned, see the module docstring)."""
        self._nack_at = np.inf  # the next hole whose window ends
        self._deadline = np.inf
        self.timeout = self.config.timeout_for(self.geometry.length)
        self.progress_at = -np.inf
        """When a chunk last newly arrived (or the message first showed)."""
        self._ack_at: float | None = None
        self._hi = -1  # highest chunk index that arrived
        self._last_arrival = -np.inf  # the latest data arrival: the SACK's ack_delay
        self._sums: Callable[[np.ndarray], np.ndarray] | None = None

    # --- state views (EC extends them) ----------------------------------------------------
    def landed(self) -> np.ndarray:
        """Chunks whose bytes are in the buffer (arrived; EC adds decoded ones)."""
        return self.arrived

    def have(self) -> np.ndarray:
        """Chunks the sender may consider delivered (landed and not known bad)."""
        return self.landed() & ~self.bad

    def use_packet_sums(self, lane: int, sums: Callable[[np.ndarray], np.ndarray]) -> None:
        if lane == Lane.DATA:
            self._sums = sums

    def placed_sums(self, chunks: np.ndarray) -> np.ndarray | None:
        """The data chunks' CRC-32s as their packets were placed (-1: read them), None
        when the driver gives none. Only bytes that came as packets have one: EC
        marks the chunks it rebuilt itself."""
        return None if self._sums is None else self._sums(chunks)

    # --- events -------------------------------------------------------------------------
    def begin(self, now: float) -> None:
        """First sign of the message: arm the global timeout."""
        if not np.isfinite(self._deadline):
            self.progress_at = now
            self._deadline = now + self.timeout

    def progressed(self, now: float) -> None:
        """A chunk newly arrived: the no-progress timeout starts again."""
        self.progress_at = now
        self.hold_deadline(now + self.timeout)

    def on_chunks(self, now: float, lane: int, chunks: np.ndarray) -> None:
        if not self.active:
            return
        self.begin(now)
        if lane == Lane.DATA:
            chunks = chunks[chunks < self.n_chunks]
            self._last_arrival = now
            self._learn_reordering(now, chunks)
            if not self.arrived[chunks].all():
                self.progressed(now)
            self.arrived[chunks] = True
            self.count("chunks_arrived", len(chunks))
            if len(chunks) and (hi := int(chunks.max())) > self._hi:
                shown = np.arange(self._hi + 1, hi)
                self.hole_since[shown[~self.arrived[shown]]] = now
                self._hi = hi
            self.gapped = self._hi > 0 and not self.arrived[: self._hi].all()
            self.verify(now, chunks)
            self.after_data(now, chunks)
        else:
            self.on_lane(now, lane, chunks)
        self.check_done(now)

    def on_lane(self, now: float, lane: int, chunks: np.ndarray) -> None:
        """Chunks of a scheme-owned lane arrived (SR has none)."""
        self.count("ignored_lane_chunks", len(chunks))

    def after_data(self, now: float, chunks: np.ndarray) -> None:
        """Schedule the SACK (sooner while a hole is open); NACK holes at once in the NACK
        variant."""
        delay = self.config.ack_delay_gapped if self.gapped else self.config.ack_delay
        if self._ack_at is None or now + delay < self._ack_at:
            self._ack_at = now + delay
        if self.nack_holes:
            self.nack_holes_below(now, self._hi)

    def on_control(self, now: float, message: ControlMessage) -> None:
        if not self.active:
            return
        if isinstance(message, Digest):
            self.begin(now)
            try:
                fresh = self.digests.add(message)
            except ProtocolError as exc:
                self.fail(exc)
                return
            self.verify(now, fresh)
            self.check_done(now)
        elif isinstance(message, Probe):
            self.begin(now)
            self.count("received_probe")
            self.report(now)
            self.check_done(now)
        elif isinstance(message, Abort):
            if message.mismatch:
                error: SDRError = ProtocolError(
                    f"receive seq {self.seq}: the sender's write is not {self.geometry.length} "
                    "bytes long (the posted length); post receives of exactly the written length"
                )
            else:
                error = MessageFailed(
                    f"receive seq {self.seq}: the sender gave the message up (its global "
                    "timeout); the buffer holds partial data"
                )
            self.fail(error, tell=False)
        else:
            self.count("ignored_control")

    def report(self, now: float) -> None:
        """Answer a PROBE: SACK, plus NACKs of bad chunks (and holes, in the NACK variant)."""
        self.recheck_bad(now)
        self.send_sack(now)
        bad = np.flatnonzero(self.bad)
        self.nack(now, bad[now - self.last_nack[bad] >= self.config.rtt])
        if self.nack_holes:
            self.nack_holes_below(now, self._hi)

    # --- timers -------------------------------------------------------------------------
    def hold_deadline(self, until: float) -> None:
        if np.isfinite(self._deadline):  # armed (the receiver's, by the first chunk)
            self._deadline = max(self._deadline, until)

    def next_timer(self) -> float | None:
        if not self.active:
            return None
        recheck = None
        if self._any_bad:
            recheck = float(self.last_nack[self.bad].min()) + self.config.rto
        return earliest(self._deadline, self._ack_at, recheck, self._nack_at)

    def handle_timer(self, now: float) -> None:
        if not self.active:
            return
        if now >= self._deadline:
            self.fail_timeout(now)
            return
        if self._ack_at is not None and now >= self._ack_at:
            self._ack_at = None
            self.send_sack(now)
        if self._any_bad and now >= float(self.last_nack[self.bad].min()) + self.config.rto:
            self.recheck_bad(now)
        if now >= self._nack_at:  # a hole's reorder window ended
            self.nack_holes_below(now, self._hi)
        self.check_done(now)

    # --- verification -------------------------------------------------------------------
    def verify(self, now: float, chunks: np.ndarray) -> None:
        """Check landed chunks with known checksums; NACK those that fail."""
        landed = self.landed()
        cand = chunks[self.digests.known[chunks] & landed[chunks] & ~self.verified[chunks]]
        if not len(cand):
            return
        sums = self.placed_sums(cand)
        if sums is not None:
            self.count("chunks_checked_from_packet_crcs", int((sums >= 0).sum()))
        ok = self.digests.check(self.data, cand, sums)
        good, failed = cand[ok], cand[~ok]
        self.accept(good)
        fresh = failed[~self.bad[failed]]
        self.reject(failed)
        if len(fresh):
            self.count("bad_chunks", len(fresh))
            self.on_bad(now, fresh)

    def accept(self, chunks: np.ndarray) -> None:
        """These chunks match their checksums: verified, and sealed against later writes."""
        if len(chunks):
            self.verified[chunks] = True
            self.bad[chunks] = False
            self._any_bad = self._any_bad and bool(self.bad.any())
            self._actions.append(SealChunks(Lane.DATA, chunks))

    def reject(self, chunks: np.ndarray) -> None:
        """These chunks do not match: bad, and reopened so that a repair can land."""
        if len(chunks):
            self.verified[chunks] = False
            self.bad[chunks] = True
            self._any_bad = True
            self._actions.append(ReopenChunks(Lane.DATA, chunks))

    def on_bad(self, now: float, chunks: np.ndarray) -> None:
        """Chunks failed their checksum: ask for them again."""
        self.nack(now, chunks)

    def recheck_bad(self, now: float) -> None:
        """Check bad chunks again (their retransmission may have landed); re-NACK the rest."""
        bad = np.flatnonzero(self.bad)
        if not len(bad):
            return
        ok = self.digests.check(self.data, bad, self.placed_sums(bad))
        self.accept(bad[ok])
        still = bad[~ok]
        self.reject(still)  # a damaged copy of the repair may have claimed them again
        self.nack(now, still[now - self.last_nack[still] >= self.config.rto])

    def check_done(self, now: float) -> None:
        """Complete (positive ACK) once the checksums are known and every chunk verified,
        and every chunk still matches its checksum at that moment (the final check; off
        when ``config.final_check`` is False, which a ReliableQP on a driver that seals
        verified chunks chooses by default; None here checks)."""
        if self.active and self.digests.complete and self.verified.all():
            if self.config.final_check is not False and not self.final_check(now):
                return
            self.send(Ack(self.seq))
            self.finish(None)

    def final_check(self, now: float) -> bool:
        """Check every chunk once more before declaring the message final; chunks whose
        bytes changed since they were verified go back to repair. True when all match."""
        everything = np.arange(self.n_chunks, dtype=np.int64)
        ok = self.digests.check(self.data, everything)
        self.count("final_checked_bytes", self.geometry.length)
        if ok.all():
            return True
        changed = everything[~ok]
        self.count("final_check_failed", len(changed))
        self.reject(changed)
        self.on_bad(now, changed)
        return False

    # --- helpers ------------------------------------------------------------------------
    def send_sack(self, now: float) -> None:
        """SACK what we have, saying how long ago the latest data arrived (the sender takes
        that off its RTT sample: the SACK's coalescing is not path delay)."""
        delay = now - self._last_arrival if np.isfinite(self._last_arrival) else 0.0
        self.send(Sack.build(self.seq, self.have(), self.digests.complete, max(delay, 0.0)))

    def nack(self, now: float, chunks: np.ndarray) -> None:
        if not len(chunks):
            return
        self.last_nack[chunks] = now
        self.count("nacked_chunks", len(chunks))
        for message in Nack.build(self.seq, np.sort(chunks)):
            self.send(message)

    def nack_holes_below(self, now: float, hi: int) -> None:
        """NACK missing chunks below ``hi`` that waited the reorder window and were not
        NACKed within the last RTO (a landed but bad chunk waits no window)."""
        holes = np.flatnonzero(~self.have()[: max(hi, 0)])
        due = self.hole_since[holes] + self.reorder_window
        waited = (due <= now) | self.arrived[holes]
        self.nack(now, holes[waited & (now - self.last_nack[holes] >= self.config.rto)])
        self._nack_at = float(due[~waited].min()) if not waited.all() else np.inf

    def _learn_reordering(self, now: float, chunks: np.ndarray) -> None:
        """Holes filled by their first copy (never NACKed, or NACKed too recently for a
        repair to be back) widen the reorder window."""
        filled = chunks[~self.arrived[chunks] & np.isfinite(self.hole_since[chunks])]
        if not len(filled):
            return
        first_copy = now - self.last_nack[filled] < self.config.rtt / 4
        first_copy |= ~np.isfinite(self.last_nack[filled])
        if first_copy.any():
            waited = float((now - self.hole_since[filled[first_copy]]).max())
            self.reorder_window = min(max(self.reorder_window, 1.25 * waited), self.config.rtt)

    def fail(self, error: SDRError, tell: bool = True) -> None:
        """Give the message up; ``tell`` the sender with a failed ACK."""
        if tell and self.active:
            self.send(Ack(self.seq, failed=True))
        self.finish(error)

    def fail_timeout(self, now: float) -> None:
        landed = self.landed()
        unverified = int((landed & ~self.verified).sum())
        digest = "" if self.digests.complete else " (checksums incomplete)"
        self.fail(
            TimeoutError(
                f"receive seq {self.seq}: {int(landed.sum())} of {self.n_chunks} chunks "
                f"received, {unverified} of them unverified{digest}; no progress for "
                f"{now - self.progress_at:.3g} s (the global timeout is {self.timeout:.3g} s)"
            )
        )
