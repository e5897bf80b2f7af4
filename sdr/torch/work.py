"""Work objects of the ``sdr`` process group: a torch future plus a completion event.

torch's collectives return a ``Work``; ``wait(timeout)`` blocks until the operation
finished (raising its error), ``get_future()`` gives the ``torch.futures.Future`` that DDP
and ``async_op=True`` callers chain on. The group's worker thread settles each pending
work exactly once: with the result, with the operation's error, or with the liveness
error when a peer is gone (whichever comes first; later ones are dropped).

An error must reach C++ as an error. ``torch.futures.Future.set_exception`` does not do
that: it completes the future with the exception object as its *value* and raises it
only when Python reads it. DDP's reducer reads the value in C++, takes the exception for
the bucket's result, and pulls a tensor out of a list that has none (a segfault in
``parseCppCommHookResult``, found with gdb on a survivor of a killed peer). So the future
handed out is a ``then`` of the one we settle, whose callback reads the value: an error
raises inside the callback, and torch records that as the child future's error.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from sdr.errors import TimeoutError

__all__ = ["SdrWork"]


class SdrWork(dist.Work):
    """One operation of the ``sdr`` process group (``what`` names it in errors)."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self._settled_with: torch.futures.Future = torch.futures.Future()
        # what torch sees: completes when _settled_with does, with its value or a C++ error
        self._future: torch.futures.Future = self._settled_with.then(_value)
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._settled = False

    # --- settled by the group ----------------------------------------------------------
    def settle(self, result: Any = None, error: BaseException | None = None) -> bool:
        """Complete with ``result`` or fail with ``error``; False if already settled."""
        with self._lock:
            if self._settled:
                return False
            self._settled = True
            self._error = error
        # the future first: whoever wait() releases reads it at once
        if error is None:
            self._settled_with.set_result(result)
        else:
            self._settled_with.set_exception(error)
        self._done.set()
        return True

    # --- torch's Work API --------------------------------------------------------------
    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until done; raise the operation's error, or sdr.TimeoutError after
        ``timeout`` (None or zero: no limit beyond the group's own timeout)."""
        seconds = timeout.total_seconds() if timeout else None
        if not self._done.wait(seconds or None):
            raise TimeoutError(f"sdr process group: {self.what} not done within {seconds} s")
        if self._error is not None:
            raise self._error
        return True

    def get_future(self) -> torch.futures.Future:
        """The future DDP and async callers chain on (its value: the output tensors)."""
        return self._future

    def is_completed(self) -> bool:
        """Whether the operation finished (successfully or not)."""
        return self._done.is_set()

    def is_success(self) -> bool:
        """Whether it finished without error."""
        return self._done.is_set() and self._error is None

    def exception(self) -> BaseException | None:
        """The operation's error, if it failed."""
        return self._error


def _value(settled: torch.futures.Future) -> Any:
    """The settled value, or its error raised (a ``then`` callback: see module docs)."""
    return settled.value()
