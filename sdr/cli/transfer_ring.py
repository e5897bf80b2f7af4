"""The receiver's ring: pieces land in a few reused buffers, then are hashed and written.

Receiving straight into a shared mapping of the output file (zero copy) costs every page
of the file a fault, and on tmpfs a zeroing, and the mapping's teardown at the end:
about 0.33 CPU s per GiB more than writing the same pages with ``pwrite`` from a reused
buffer (0.09), on our VMs (docs/benchmarks.md, "Issue 35, round 16"). So the receiver
posts each piece into the next slot of a ring of ``slots`` buffers of one message each;
as the pieces finish, in file order, a writer thread feeds each to the digest (the
algorithm the hello named, :func:`~sdr.cli.transfer_digest.hasher`) and writes it to the
file, and only then is its slot posted again. The digest is ready when the last piece
is written: no second pass over the file at the end.

A piece that finishes before the one ahead of it keeps its slot until that one is
written (the digest takes the pieces in order), so the ring is sized from the link:
enough slots for :data:`SLACK_RTTS` round trips at the sender's rate plus two pieces,
never more than :data:`RING_MAX` bytes. The sender waits for
a slot only where repairs of one piece take longer than that.

The ring's own pages are fresh memory once per transfer (on our VMs 0.36 CPU s/GiB when
recently freed, 1.7 once the host has taken them back), against the 0.24 s/GiB the ring
saves on every byte of the file: so a file shorter than :data:`RING_SPAN` rings is
received into its mapping as before.
"""

from __future__ import annotations

import math
import mmap
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["RING_MAX", "RING_SPAN", "SLACK_RTTS", "ReceiveRing", "ring_slots"]

RING_MAX = 256 << 20
"""The most memory a ring takes; a message larger than half of it is received into the
file's own mapping instead (:func:`ring_slots` returns 0)."""

RING_SPAN = 8
"""The ring is used only for a file at least this many times its size (where its saving
per byte pays for its fresh pages, 1.7 / 0.24 = 7 at worst)."""

SLACK_RTTS = 4
"""Round trips of data at the sender's rate that the ring holds beyond two pieces: the
head piece's repairs (a NACK, a resend, a lost resend) before the sender runs out."""


def ring_slots(size: int, message: int, depth: int, rate: float | None, rtt: float) -> int:
    """Slots of one ``message`` each for a ``size``-byte file: :data:`SLACK_RTTS` round
    trips at ``rate`` bits/s plus two pieces (the window's ``depth`` when the rate is not
    known; more than the window where the rate asks for it, as a finished piece keeps its
    slot until the ones ahead of it are written), at most :data:`RING_MAX` bytes; 0 (use
    the mapping) when two messages do not fit that or the file is shorter than
    :data:`RING_SPAN` rings."""
    if size == 0 or 2 * message > RING_MAX:
        return 0
    want = depth if rate is None else math.ceil(rate / 8 * rtt * SLACK_RTTS / message) + 2
    slots = max(1, min(want, RING_MAX // message))
    return slots if slots * message * RING_SPAN <= size else 0


class ReceiveRing:
    """``slots`` buffers of ``message`` bytes (:attr:`buffer`, one region to register),
    written in file order to the file open as ``fd`` by a thread, through ``digest``
    (an incremental hash, or None).

    :meth:`post` puts the next piece into the next slot (only while :meth:`room`);
    :meth:`pump` hands the finished pieces at the head to the writer; :meth:`finish`
    waits for them and returns the digest; :meth:`close` stops the writer (after what
    it was handed). ``fresh(offset, length)`` is called for a slot's first use (to
    populate its pages off the progress loop)."""

    def __init__(
        self,
        fd: int,
        message: int,
        slots: int,
        digest: Any | None,
        fresh: Callable[[int, int], None] | None = None,
    ) -> None:
        if slots < 1 or message < 1:
            raise ValueError(f"a ring needs slots and message >= 1, got {slots}, {message}")
        self.buffer = mmap.mmap(-1, slots * message)
        self._fd, self._message, self._slots = fd, message, slots
        self._digest = digest
        self.fresh = fresh
        """Called as ``fresh(slot_offset, length)`` at each slot's first use."""
        self._open: deque[tuple[Any, int, int, int]] = deque()  # handle, slot, offset, n
        self._posted = 0
        self._written = 0  # pieces written (the writer's count; a slot is free after)
        self.written_bytes = 0
        """Bytes written to the file so far."""
        self._error: OSError | None = None
        self._todo: queue.SimpleQueue[tuple[int, int, int] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="sdr-ring-writer", daemon=True)
        self._thread.start()

    def room(self) -> int:
        """Slots free for a new piece (written, or never used)."""
        return self._slots - (self._posted - self._written)

    def post(self, offset: int, length: int, post_recv: Callable[[int, int], Any]) -> Any:
        """Post the file's ``[offset, offset + length)`` into the next slot through
        ``post_recv(slot_offset, length)``; its handle. Pieces must come in file order."""
        if not 0 < length <= self._message:
            raise ValueError(f"a piece of {length} bytes does not fit a {self._message}-byte slot")
        if self.room() < 1:
            raise RuntimeError("no free slot: post only while room() > 0")
        slot = (self._posted % self._slots) * self._message
        if self._posted < self._slots and self.fresh is not None:
            self.fresh(slot, length)
        handle = post_recv(slot, length)
        self._open.append((handle, slot, offset, length))
        self._posted += 1
        return handle

    def pump(self) -> None:
        """Hand the finished pieces at the head, in file order, to the writer (a failed
        one stops there: the transfer has failed); raise the writer's error, if any."""
        if self._error is not None:
            raise self._error
        while self._open and self._open[0][0].finished and self._open[0][0].done:
            _, slot, offset, length = self._open.popleft()
            self._todo.put((slot, offset, length))

    def finish(self) -> str | None:
        """Once every piece has finished: write them all, stop the writer; the digest's
        hex value (None without one). OSError when a write failed."""
        self.pump()
        if self._open:
            raise RuntimeError(f"{len(self._open)} pieces have not finished")
        self.close()
        if self._error is not None:
            raise self._error
        return None if self._digest is None else self._digest.hexdigest()

    def salvage(self) -> None:
        """After a failure: write every piece that did complete, in any order (the
        digest is no longer needed), so a kept partial file holds them."""
        self._digest = None
        for handle, slot, offset, length in self._open:
            if handle.finished and handle.done:
                self._todo.put((slot, offset, length))
        self._open.clear()

    def close(self) -> None:
        """Stop the writer once it has written what it was handed (idempotent)."""
        if self._thread.is_alive():
            self._todo.put(None)
            self._thread.join()

    def __enter__(self) -> ReceiveRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        with memoryview(self.buffer) as whole:
            while (item := self._todo.get()) is not None:
                slot, offset, length = item
                if self._error is None:
                    with whole[slot : slot + length] as piece:
                        self._write(piece, offset)
                self.written_bytes += length
                self._written += 1

    def _write(self, piece: memoryview, offset: int) -> None:
        digest, done = self._digest, 0
        try:
            if digest is not None:
                digest.update(piece)
            while done < len(piece):
                done += os.pwrite(self._fd, piece[done:], offset + done)
        except OSError as exc:
            self._error = OSError(
                exc.errno, f"writing the received file at offset {offset + done}: {exc.strerror}"
            )
