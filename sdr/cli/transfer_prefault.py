"""Fault the receiver's pieces in ahead of the data, off the progress loop.

A slot of the receiver's ring (at its first use; or, where messages are too large for a
ring, a piece of the output mapping) is posted at once and its pages are populated by a
background thread, a step at a time, in posting order. Populating 64 MiB of a fresh file
mapping takes 65-180 ms on our machines; done before each post (as it was), the first
window of a transfer held the sender for about 0.6 s of a 2.7 s transfer (256 MiB at
1 Gbit/s, four 64 MiB pieces: docs/benchmarks.md "The receiver's prefault"). The thread runs in
``madvise`` with the GIL released, far faster than any link fills the pages, so the
data still lands on populated pages; one that it does not reach in time only faults.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from sdr.backends.udp.sockets import prefault

__all__ = ["NICE", "PrefaultAhead", "STEP"]

STEP = 4 << 20
"""Bytes populated per call: the front moves ahead of the data in steps this small."""

NICE = 19
"""The thread's nice value (Linux: per thread). On a busy two-core machine the thread
then runs on what the progress loops leave; where it falls behind, pages fault on
first write instead."""


class PrefaultAhead:
    """Populate ``[offset, offset + length)`` ranges of ``buffer`` in a background thread,
    in the order :meth:`add` was called. :meth:`close` stops the thread (the ranges not
    reached are left to fault on first write) and must run before ``buffer`` closes."""

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer
        self._todo: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self.populated = 0
        """Bytes populated so far (for tests and reports)."""
        self._thread = threading.Thread(target=self._run, name="sdr-prefault", daemon=True)
        self._thread.start()

    def add(self, offset: int, length: int) -> None:
        self._todo.put((offset, length))

    def close(self) -> None:
        self._stop.set()
        self._todo.put(None)
        self._thread.join()

    def __enter__(self) -> PrefaultAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        try:  # idle priority: populating must not take a core from a progress loop
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        except (AttributeError, OSError):
            pass  # not Linux, or not allowed: the thread runs at the caller's priority
        with memoryview(self._buffer) as whole:
            while (item := self._todo.get()) is not None:
                offset, length = item
                for start in range(offset, offset + length, STEP):
                    if self._stop.is_set():
                        return
                    stop = min(start + STEP, offset + length)
                    with whole[start:stop] as step:
                        prefault(step)
                    self.populated += stop - start
