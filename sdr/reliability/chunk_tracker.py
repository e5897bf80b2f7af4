"""Per-chunk send state of one message's data lane: queued, sent, acknowledged, RTO."""

from __future__ import annotations

import numpy as np

__all__ = ["ChunkTracker"]


class ChunkTracker:
    """What the sender knows about each data chunk, as NumPy arrays (cheap for 10^4 chunks).

    A chunk is *queued* from the moment it is handed to the SDR stream until the driver
    reports it left (pacing may hold it); its RTO runs from its departure, never from the
    queueing, so a slow pacer does not cause spurious retransmissions.

    ``deadline`` is written only through :meth:`_set_deadline`, which keeps the earliest
    one (:meth:`next_deadline`, asked several times a progress round) without a scan;
    ``queued`` only through :meth:`queue` and :meth:`sent`, which keep whether any chunk
    is queued (:meth:`any_queued`, asked as often) the same way.
    """

    def __init__(self, n_chunks: int) -> None:
        self.acked = np.zeros(n_chunks, dtype=bool)
        self.queued = np.zeros(n_chunks, dtype=bool)
        self.sends = np.zeros(n_chunks, dtype=np.int32)
        self.last_sent = np.full(n_chunks, -np.inf)
        self.deadline = np.full(n_chunks, np.inf)
        self._earliest: float | None = np.inf  # min(deadline); None: to be recomputed
        self._any_queued: bool | None = False  # queued.any(); None: to be recomputed

    def _set_deadline(self, chunks: np.ndarray, at: float) -> None:
        if not len(chunks):
            return
        if self._earliest is not None and at > self._earliest:
            if float(self.deadline[chunks].min()) <= self._earliest:
                self._earliest = None  # the earliest one moved later: rescan when asked
        elif self._earliest is not None:
            self._earliest = at
        self.deadline[chunks] = at

    def queue(self, chunks: np.ndarray) -> None:
        """The chunks were handed to the stream (their timers stop until they leave)."""
        self.queued[chunks] = True
        if len(chunks):
            self._any_queued = True
        self._set_deadline(chunks, np.inf)

    def sent(self, now: float, chunks: np.ndarray, rto: float | None) -> None:
        """The chunks left at ``now``; arm their RTO (unless ``rto`` is None or acked)."""
        self.queued[chunks] = False
        if self._any_queued and len(chunks):
            self._any_queued = None
        self.sends[chunks] += 1
        self.last_sent[chunks] = now
        if rto is not None:
            self._set_deadline(chunks[~self.acked[chunks]], now + rto)

    def arm(self, now: float, chunks: np.ndarray, rto: float) -> None:
        """Arm the RTO of chunks that are neither acknowledged nor queued."""
        self._set_deadline(chunks[~self.acked[chunks] & ~self.queued[chunks]], now + rto)

    def pull_in(self, at: float) -> np.ndarray:
        """Bring every armed RTO later than ``at`` forward to ``at`` (a back-off ended);
        the chunks moved."""
        moved = np.flatnonzero(np.isfinite(self.deadline) & (self.deadline > at))
        self._set_deadline(moved, at)
        return moved

    def ack(self, chunks: np.ndarray) -> np.ndarray:
        """Mark chunks acknowledged; returns those that were not before."""
        fresh = chunks[~self.acked[chunks]]
        self.acked[fresh] = True
        self._set_deadline(fresh, np.inf)
        return fresh

    def unack(self, chunks: np.ndarray) -> None:
        """The receiver lost these chunks after all (failed checksum): not acknowledged."""
        self.acked[chunks] = False

    def due(self, now: float) -> np.ndarray:
        """Chunks whose RTO expired at or before ``now``."""
        return np.flatnonzero(self.deadline <= now)

    def any_queued(self) -> bool:
        """Whether any chunk waits in the driver's queue."""
        if self._any_queued is None:
            self._any_queued = bool(self.queued.any())
        return self._any_queued

    def next_deadline(self) -> float:
        """The earliest armed RTO (inf when none)."""
        if self._earliest is None:
            self._earliest = float(self.deadline.min()) if len(self.deadline) else np.inf
        return self._earliest

    @property
    def retransmissions(self) -> int:
        """Chunk sends beyond the first of each chunk."""
        return int(np.maximum(self.sends - 1, 0).sum())
