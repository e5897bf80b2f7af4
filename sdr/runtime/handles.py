"""Handles of reliable writes and receives, and driving several reliable QPs together.

A handle completes only after the scheme verified every byte of the message (receiver)
or got the receiver's positive ACK (sender). ``wait`` progresses its own reliable QP; in
one process with both ends (tests, demos) use :func:`wait_all`, which progresses every
QP involved and lets a simulated clock jump to the next timer.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from sdr.errors import SDRError, TimeoutError

if TYPE_CHECKING:
    from sdr.runtime.reliable_qp import ReliableQP

__all__ = ["HandleState", "WriteHandle", "ReceiveHandle", "drive", "wait_all"]

_IDLE_S = 0.001
_MIN_STEP_S = 1e-7


class HandleState(enum.Enum):
    PENDING = "pending"  # waiting for an in-flight slot
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"


class _Handle:
    kind = "message"

    def __init__(self, rqp: ReliableQP, seq: int, length: int) -> None:
        self.rqp = rqp
        self.seq = seq
        self.length = length
        self.state = HandleState.PENDING
        self.error: SDRError | None = None
        self.stats: dict[str, int] = {}
        """Scheme counters of this message (chunks sent, retransmitted, NACKs ...)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} seq={self.seq} {self.length} B {self.state.value}>"

    @property
    def done(self) -> bool:
        """Completed and verified."""
        return self.state is HandleState.COMPLETED

    @property
    def finished(self) -> bool:
        """Completed or failed."""
        return self.state in (HandleState.COMPLETED, HandleState.FAILED)

    def _check(self) -> bool:
        if self.state is HandleState.FAILED:
            assert self.error is not None
            raise self.error
        return self.done

    def _finish(self, error: SDRError | None, stats: dict[str, int]) -> None:
        self.state = HandleState.COMPLETED if error is None else HandleState.FAILED
        self.error = error
        self.stats = dict(stats)

    def poll(self) -> bool:
        """Progress once; True when complete. Raises the message's error if it failed."""
        self.rqp.progress()
        return self._check()

    def wait(self, timeout: float | None = None) -> _Handle:
        """Progress until complete; raises its error (MessageFailed, sdr.TimeoutError,
        ProtocolError) if it failed, sdr.TimeoutError if ``timeout`` s pass first."""
        drive([self.rqp], self._check, timeout, f"{self.kind} seq {self.seq}")
        return self


class WriteHandle(_Handle):
    """A reliable write: complete when the receiver acknowledged every verified byte."""

    kind = "write"

    @property
    def retransmissions(self) -> int:
        """Data chunks sent again (0 while in flight)."""
        return self.stats.get("chunks_retransmitted", 0)


class ReceiveHandle(_Handle):
    """A reliable receive: complete when every byte landed (or was decoded) and verified."""

    kind = "receive"


def drive(
    rqps: Iterable[ReliableQP],
    condition: Callable[[], bool],
    timeout: float | None = None,
    what: str = "condition",
) -> None:
    """Progress ``rqps`` until ``condition()`` is true (sdr.TimeoutError after ``timeout`` s).

    When nothing is left to do it waits on the first QP's transport until the earliest
    timer (a ManualClock jumps there), never past the moment a paced sender's pacer
    allows its next batch (:meth:`ReliableQP.idle_step`), nor than half an RTT when the
    QPs live on several transports. After a round that worked it runs the next at once
    unless every QP is :meth:`~ReliableQP.quiet`, or every QP may let arrivals wait
    (:meth:`ReliableQP.hold`): then it holds that long (within the same bounds)
    without waking for them.
    """
    group = list(dict.fromkeys(rqps))
    ctx = group[0].ctx
    deadline = None if timeout is None else ctx.now() + timeout
    while not condition():
        worked = sum(r.progress() for r in group)
        if worked and condition():
            break
        hold = min(r.hold() for r in group) if worked else 0.0
        if worked and not hold and not all(r.quiet() for r in group):
            continue  # more to do at once
        now = ctx.now()
        if deadline is not None and now >= deadline:
            raise TimeoutError(f"{what} did not finish within {timeout} s")
        timers = [t for t in (r.next_timer() for r in group) if t is not None]
        step = max(min(timers) - now, _MIN_STEP_S) if timers else _IDLE_S
        for r in group:
            step = min(step, r.idle_step())
        if len({id(r.ctx.transport) for r in group}) > 1:
            # we can only block on one transport: wake up in time for the others' packets
            step = min(step, *(r.config.rtt / 2 for r in group))
        if deadline is not None:
            step = min(step, max(deadline - now, _MIN_STEP_S))
        if hold:
            ctx.transport.hold(min(step, hold))
        else:
            ctx.transport.wait(step)


def wait_all(handles: Iterable[_Handle], timeout: float | None = None) -> None:
    """Progress every QP of ``handles`` until all finished; raise the first failure."""
    handles = list(handles)
    drive(
        (h.rqp for h in handles),
        lambda: all(h.finished for h in handles),
        timeout,
        f"{len(handles)} messages",
    )
    for h in handles:
        h._check()
