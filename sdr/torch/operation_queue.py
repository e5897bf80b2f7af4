"""The ``sdr`` process group's operations, run one at a time in call order.

Every rank issues collectives in the same order (torch requires it), so one worker
thread per group runs them as they were submitted; :meth:`OperationQueue.submit` returns
an :class:`~sdr.torch.work.SdrWork` at once. The first failure (an operation's error, its
timeout, or a peer gone, reported through :meth:`OperationQueue.fail`) fails every
pending and later operation with the same one-line error: no rank carries on with
results the others did not get.
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
    """One worker thread running submitted operations in order (started at once)."""

    def __init__(self) -> None:
        self._pending: set[SdrWork] = set()
        self._lock = threading.Lock()
        self.failure: BaseException | None = None
        """The group's first failure (None while healthy)."""
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._serve, daemon=True, name="sdr-pg-worker")
        self._worker.start()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, fn = item
            if self.failure is not None:
                work.settle(error=self.failure)
                continue
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - settles the work
                self.fail(_one_line(work.what, exc))
            else:
                work.settle(result)
            with self._lock:
                self._pending.discard(work)

    def fail(self, error: BaseException) -> None:
        """Record the group's first failure and fail every pending operation with it."""
        with self._lock:
            if self.failure is None:
                self.failure = error
            pending = list(self._pending)
            self._pending.clear()
        if pending:
            log.error("%s", error)
        for work in pending:
            work.settle(error=self.failure)

    def submit(self, what: str, fn: Callable[[], Any]) -> SdrWork:
        """Queue ``fn`` (``what`` names it in errors); its work settles with its result."""
        work = SdrWork(what)
        with self._lock:
            failure = self.failure
            if failure is None:
                self._pending.add(work)
        if failure is not None:
            work.settle(error=failure)
        else:
            self._queue.put((work, fn))
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
