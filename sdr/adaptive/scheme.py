"""A scheme that runs a different member scheme per message, chosen by an adaptive policy.

Order-based matching needs both ends to agree on every message's lanes before any byte
moves, but the receiver posts receives before it can know the sender's choice. So the
lane layout is the same for every member: lane 0 the data, lane 1 a parity lane as long as
the largest member needs (at least one chunk; SR members leave it empty). The sender
picks the member when the write is admitted and says which in every DIGEST: the DIGEST's
scheme fingerprint already names scheme, k, m and chunk size. The receiver's machine is a
proxy that keeps arrivals until the first DIGEST, builds the member's receiver from the
fingerprint, and replays them (with their original times). While it waits it asks for the
DIGEST (a SACK without DIGEST_OK, which every sender answers by resending it) every RTT,
and answers PROBEs the same way. When the member finishes, the proxy sends a LOSS_REPORT
(first-transmission losses from its bitmaps, see sdr.adaptive.report) before the ACK.

The sender's proxy times ACKs against the message's last data departure (RTT samples).
Member EC machines keep their parity in a prefix of the shared-size lane buffer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sdr.adaptive.policy import AdaptivePolicy, Candidate
from sdr.adaptive.report import GapCounter, LossReport
from sdr.errors import MessageFailed, ProtocolError, SDRError, TimeoutError
from sdr.reliability.base import Finished, Scheme, SchemeAction, SendMessage, Status, earliest
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.messages import Abort, Ack, ControlMessage, Digest, Probe, Sack
from sdr.reliability.registry import create_scheme

__all__ = ["AdaptiveScheme", "AdaptiveSender", "AdaptiveReceiver"]

_PARITY = 1


def _share_parity(inner: Any, lane: np.ndarray) -> None:
    """Point a member machine's own parity buffer at a prefix of the lane buffer."""
    own = getattr(inner, "parity", None)
    if isinstance(own, np.ndarray) and own.size <= lane.size:
        inner.parity = lane[: own.size]


class AdaptiveScheme(Scheme):
    """Member schemes (one per policy candidate) behind one lane layout."""

    def __init__(self, config: ReliabilityConfig, policy: AdaptivePolicy) -> None:
        self.policy = policy
        self.members: dict[Candidate, Scheme] = {
            c: create_scheme(config.replace(**c.changes())) for c in policy.candidates
        }
        self.by_fingerprint = {s.fingerprint: (c, s) for c, s in self.members.items()}
        self.acks_progressively = all(s.acks_progressively for s in self.members.values())  # type: ignore[misc]
        super().__init__(config)

    @property
    def name(self) -> str:
        return "adaptive"

    def describe(self) -> str:
        return "adaptive [" + "; ".join(s.describe() for s in self.members.values()) + "]"

    def lanes(self, length: int) -> tuple[int, ...]:
        return (length, self.parity_bytes(length))

    def before_write(self, now: float, length: int) -> None:
        """The policy picks this write's member scheme (its current candidate)."""
        self.policy.before_write(now, length)

    def on_raw_control(self, now: float, data: bytes) -> bool:
        """LOSS_REPORTs feed the policy's estimator; everything else goes on."""
        return self.policy.on_control(now, data)

    def parity_bytes(self, length: int) -> int:
        """Lane 1's length: the largest member parity lane, at least one chunk."""
        sizes = [s.lanes(length) for s in self.members.values()]
        return max([self.chunk_size, *(lanes[1] for lanes in sizes if len(lanes) > 1)])

    def sender(self, seq: int, data: memoryview) -> AdaptiveSender:  # type: ignore[override]
        choice = self.policy.current
        inner = self.members[choice].sender(seq, data)
        return AdaptiveSender(self.policy, choice, inner, self.parity_bytes(len(data)))

    def receiver(self, seq: int, data: memoryview) -> AdaptiveReceiver:  # type: ignore[override]
        return AdaptiveReceiver(self, seq, data)


class AdaptiveSender:
    """A member's sender machine, plus RTT sampling; everything else is delegated."""

    def __init__(
        self, policy: AdaptivePolicy, choice: Candidate, inner: Any, parity_bytes: int
    ) -> None:
        self.policy = policy
        self.choice = choice
        self.inner = inner
        self.parity = np.zeros(parity_bytes, dtype=np.uint8)
        _share_parity(inner, self.parity)
        inner.count(f"adaptive_{choice.label()}")
        inner.digest.announce = True  # the receiver learns the member from the first DIGEST
        self._last_departure: float | None = None

    def lane_buffer(self, lane: int) -> np.ndarray | None:
        return self.parity if lane == _PARITY else self.inner.lane_buffer(lane)

    @property
    def rtt(self) -> Any:
        """The member's RTT estimator. The connection hands every new write its own, shared
        one (what the others measured); set on the proxy alone, the member kept a fresh
        estimator at the configured RTO: spurious RTOs (240 of 8192 chunks resent for
        nothing, 256 MiB over 25 ms at loss 1e-3) and samples the connection never saw."""
        return self.inner.rtt

    @rtt.setter
    def rtt(self, estimator: Any) -> None:
        self.inner.rtt = estimator

    def on_sent(self, now: float, lane: int, chunks: np.ndarray) -> None:
        if lane == 0 and len(chunks):
            self._last_departure = now
        self.inner.on_sent(now, lane, chunks)

    def on_control(self, now: float, message: ControlMessage) -> None:
        if (
            isinstance(message, Ack)
            and not message.failed
            and self.inner.active
            and self._last_departure is not None
        ):
            self.policy.on_rtt(now, now - self._last_departure)
        self.inner.on_control(now, message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class AdaptiveReceiver:
    """Waits for the DIGEST to learn the member scheme, then delegates to its receiver."""

    def __init__(self, scheme: AdaptiveScheme, seq: int, data: memoryview) -> None:
        self.scheme = scheme
        self.config = scheme.config
        self.seq = seq
        self.data = data
        cs = scheme.chunk_size
        self.parity = np.zeros(scheme.parity_bytes(len(data)), dtype=np.uint8)
        self.gaps = (GapCounter(-(-len(data) // cs)), GapCounter(len(self.parity) // cs))
        self.inner: Any = None
        self.own_stats: dict[str, int] = {}
        self._own_status = Status.ACTIVE
        self._actions: list[SchemeAction] = []
        self._pending: list[tuple[float, int, np.ndarray]] = []
        self._sums: dict[int, Callable[[np.ndarray], np.ndarray]] = {}
        self._deadline = math.inf
        self._ask_at: float | None = None
        self._first: float | None = None
        self._last = 0.0
        self._landed = 0
        self._reported = False

    # --- machine interface ------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.inner.active if self.inner is not None else self._own_status is Status.ACTIVE

    @property
    def gapped(self) -> bool:
        """The member receiver has a hole (none before the DIGEST named the member)."""
        return bool(self.inner is not None and self.inner.gapped)

    def use_packet_sums(self, lane: int, sums: Callable[[np.ndarray], np.ndarray]) -> None:
        """Kept for the member receiver (handed on once the DIGEST names it)."""
        self._sums[lane] = sums
        if self.inner is not None:
            self.inner.use_packet_sums(lane, sums)

    @property
    def status(self) -> Status:
        return self.inner.status if self.inner is not None else self._own_status

    @property
    def stats(self) -> dict[str, int]:
        return self.inner.stats if self.inner is not None else self.own_stats

    def lane_buffer(self, lane: int) -> np.ndarray | None:
        return self.parity if lane == _PARITY else None

    def has_work(self) -> bool:
        return self.inner is not None and self.inner.has_work()

    def do_work(self, now: float) -> None:
        if self.inner is not None:
            self.inner.do_work(now)

    def next_timer(self) -> float | None:
        if self.inner is not None:
            return self.inner.next_timer()
        if not self.active:
            return None
        return earliest(self._deadline, self._ask_at)

    def hold_deadline(self, until: float) -> None:
        """The connection made progress: do not give up before ``until``."""
        if self.inner is not None:
            self.inner.hold_deadline(until)
        elif math.isfinite(self._deadline):
            self._deadline = max(self._deadline, until)

    def handle_timer(self, now: float) -> None:
        if self.inner is not None:
            self.inner.handle_timer(now)
        elif self.active and now >= self._deadline:
            timeout = self.config.timeout_for(len(self.data))
            self._fail(
                TimeoutError(
                    f"receive seq {self.seq}: no DIGEST (so no scheme) within the global "
                    f"timeout of {timeout:.3g} s after its first chunk"
                )
            )
        elif self.active and self._ask_at is not None and now >= self._ask_at:
            self._ask_for_digest(now)

    def on_chunks(self, now: float, lane: int, chunks: np.ndarray) -> None:
        if not self.active:
            return
        if lane < len(self.gaps):  # delivery rate over first-pass arrivals only
            fresh = int((chunks > self.gaps[lane].hi).sum())
            self.gaps[lane].add(chunks)
            if fresh:
                self._first = now if self._first is None else self._first
                self._last = now
                self._landed += fresh * self.scheme.chunk_size
        if self.inner is not None:
            self.inner.on_chunks(now, lane, chunks)
            return
        self._pending.append((now, lane, chunks.copy()))
        if not math.isfinite(self._deadline):
            self._deadline = now + self.config.timeout_for(len(self.data))
        if self._ask_at is None:
            self._ask_at = now + self.config.ack_delay

    def on_control(self, now: float, message: ControlMessage) -> None:
        if self.inner is not None:
            self.inner.on_control(now, message)
        elif not self.active:
            return
        elif isinstance(message, Digest):
            self._bind(now, message)
        elif isinstance(message, Probe):
            self._ask_for_digest(now)
        elif isinstance(message, Abort):
            self._own_status = Status.FAILED
            self._actions.append(
                Finished(
                    MessageFailed(
                        f"receive seq {self.seq}: the sender gave the message up before its scheme "
                        "was known" + (" (length mismatch)" if message.mismatch else "")
                    )
                )
            )

    def finish(self, error: SDRError | None = None) -> None:
        if self.inner is not None:
            self.inner.finish(error)
        elif self.active:
            self._own_status = Status.COMPLETED if error is None else Status.FAILED
            self._actions.append(Finished(error))

    def actions(self) -> list[SchemeAction]:
        out, self._actions = self._actions, []
        if self.inner is not None:
            out += self.inner.actions()
        if not self._reported and any(isinstance(a, Finished) for a in out):
            self._reported = True
            out.insert(0, SendMessage(self._report()))
        return out

    # --- helpers ------------------------------------------------------------------------
    def _bind(self, now: float, digest: Digest) -> None:
        entry = self.scheme.by_fingerprint.get(digest.scheme)
        if entry is None:
            self._fail(
                ProtocolError(
                    f"message seq {self.seq}: the sender's scheme (fingerprint "
                    f"{digest.scheme:#010x}) is none of this end's adaptive candidates; "
                    "give both ends the same candidates"
                )
            )
            return
        choice, member = entry
        inner = member.receiver(self.seq, self.data)
        _share_parity(inner, self.parity)
        for key, value in self.own_stats.items():
            inner.count(key, value)
        inner.count(f"adaptive_{choice.label()}")
        self.inner = inner
        for lane, sums in self._sums.items():
            inner.use_packet_sums(lane, sums)
        for when, lane, chunks in self._pending:
            inner.on_chunks(when, lane, chunks)
        self._pending.clear()
        inner.on_control(now, digest)

    def _ask_for_digest(self, now: float) -> None:
        have = np.zeros(len(self.gaps[0].landed), dtype=bool)
        self._actions.append(SendMessage(Sack.build(self.seq, have, digest_ok=False)))
        self.own_stats["digest_requests"] = self.own_stats.get("digest_requests", 0) + 1
        self._ask_at = now + self.config.rtt

    def _fail(self, error: SDRError) -> None:
        self._actions.append(SendMessage(Ack(self.seq, failed=True)))
        self._own_status = Status.FAILED
        self._actions.append(Finished(error))

    def _report(self) -> LossReport:
        trials = sum(g.trials for g in self.gaps)
        losses = sum(g.losses for g in self.gaps)
        runs = sum(g.runs for g in self.gaps)
        span = 0.0 if self._first is None else self._last - self._first
        return LossReport(self.seq, trials, losses, runs, self._landed, int(span * 1e9))
