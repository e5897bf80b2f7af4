"""The ``sdr`` process group's operations, run one at a time in call order.

Every rank issues collectives in the same order (torch requires it), so one worker
thread per group runs them as they were submitted; :meth:`OperationQueue.submit` returns
an :class:`~sdr.torch.work.SdrWork` at once. The first failure (an operation's error, its
timeout, or a peer gone, reported through :meth:`OperationQueue.fail`) fails every
pending and later operation with the same one-line error: no rank carries on with
results the others did not get.

A caller that waits for its result at once may run an operation on its own thread
instead, when nothing is queued (:meth:`OperationQueue.run_here`): one operation runs at a
time either way, in call order.

Only the thread that runs an operation settles its work, in order, and only once it has
stopped: a work whose future fails is a tensor nobody writes any more (failed from the
thread that found the peer gone, DDP's reducer went on while the worker still wrote the
gradient bucket). The running operation's waits ask :meth:`OperationQueue.check`, so a
failure ends it at its next poll; one that does not end within ``grace`` seconds is failed
from outside all the same, with a warning, so that no caller waits out the whole timeout.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from sdr.errors import SDRError
from sdr.torch.work import SdrWork

__all__ = ["OperationQueue"]

log = logging.getLogger("sdr.torch.process_group")  # a failure is logged as the group's


class OperationQueue:
    """One worker thread running submitted operations in order (started at once).

    ``grace``: how long after a failure the running operation may take to notice it
    before its work is failed from outside (seconds)."""

    def __init__(self, grace: float = 5.0) -> None:
        self._pending: list[SdrWork] = []  # submitted and not settled, in order
        self._lock = threading.Lock()
        self.grace = grace
        self.failure: BaseException | None = None
        """The group's first failure (None while healthy)."""
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._running = threading.Lock()
        """Held while an operation runs (on the worker, or on a caller: :meth:`run_here`)."""
        self._runner: threading.Thread | None = None
        """The thread running an operation now."""
        self._worker = threading.Thread(target=self._serve, daemon=True, name="sdr-pg-worker")
        self._worker.start()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, fn = item
            with self._running:
                self._run(work, fn)

    def _run(self, work: SdrWork, fn: Callable[[], Any]) -> None:
        """Run one operation (``_running`` held) and settle its work."""
        self._runner = threading.current_thread()
        try:
            if self.failure is None:
                try:
                    result = fn()
                except BaseException as exc:  # noqa: BLE001 - settles the work
                    self.fail(_one_line(work.what, exc))
                else:
                    self._settle(work, result=result)
                    return
            self._settle(work, error=self.failure)
        finally:
            self._runner = None

    def _settle(
        self, work: SdrWork, result: Any = None, error: BaseException | None = None
    ) -> None:
        with self._lock:
            if work in self._pending:
                self._pending.remove(work)
        work.settle(result, error)

    def check(self) -> None:
        """Raise the group's failure, if there is one (the running operation's waits ask)."""
        if self.failure is not None:
            raise self.failure

    def fail(self, error: BaseException) -> None:
        """Record the group's first failure; the worker fails every pending operation with
        it as it reaches them (the running one once it stops: see module docs)."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = error
            waiting = bool(self._pending)
        if not waiting:
            return  # nothing of ours fails (a peer that left at the end): nothing to say
        log.error("%s", error)
        if threading.current_thread() not in (self._worker, self._runner):
            timer = threading.Timer(self.grace, self._fail_stuck)
            timer.daemon = True
            timer.start()

    def _fail_stuck(self) -> None:
        with self._lock:
            stuck = list(self._pending)
            self._pending.clear()
        if stuck:
            log.warning(
                "sdr process group: %s still runs %g s after the failure; failing it anyway",
                stuck[0].what,
                self.grace,
            )
        for work in stuck:
            work.settle(error=self.failure)

    def submit(self, what: str, fn: Callable[[], Any]) -> SdrWork:
        """Queue ``fn`` (``what`` names it in errors); its work settles with its result."""
        work = SdrWork(what)
        with self._lock:
            failure = self.failure
            if failure is None:
                self._pending.append(work)
        if failure is not None:
            work.settle(error=failure)
        else:
            self._queue.put((work, fn))
        return work

    def run_here(self, what: str, fn: Callable[[], Any]) -> SdrWork:
        """Run ``fn`` on the calling thread when nothing is queued or running, else
        :meth:`submit` it; the work is settled on return in the first case. For a caller
        that waits for the result at once: the two hand-offs to the worker and back cost
        0.3 ms each at the median and up to 4.5 ms (the other thread waits for the GIL)
        in a DiLoCo outer step, whose deadline counts them. An operation submitted
        meanwhile from another thread runs after this one, as it would have. A failure
        found elsewhere ends it at its next poll of :meth:`check`, as on the worker; the
        grace does not apply (nobody waits for its work: the caller runs it)."""
        work = SdrWork(what)
        with self._lock:  # nothing pending: the worker holds nothing, nor will before us
            here = not self._pending and self.failure is None
            here = here and self._running.acquire(blocking=False)
            if here:
                self._pending.append(work)
        if not here:
            return self.submit(what, fn)
        try:
            self._run(work, fn)
        finally:
            self._running.release()
        return work

    def stop(self, timeout: float) -> None:
        """Let the worker finish what is queued and end, waiting up to ``timeout`` s."""
        self._queue.put(None)
        self._worker.join(timeout=timeout)

    @property
    def running(self) -> bool:
        """Whether the worker still runs (after :meth:`stop`: an operation still waits)."""
        return self._worker.is_alive()


def _one_line(what: str, exc: BaseException) -> BaseException:
    """The error as users see it: which operation, and the first line of why."""
    if isinstance(exc, SDRError) and str(exc).startswith("sdr process group"):
        return exc
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    error: BaseException = SDRError(
        f"sdr process group: {what} failed: {type(exc).__name__}: {first}"
    )
    if isinstance(exc, SDRError):
        try:  # keep the kind (TimeoutError, ConfigError, ...) for callers that catch it
            error = type(exc)(f"sdr process group: {what} failed: {first}")
        except TypeError:
            pass
    error.__cause__ = exc
    return error
