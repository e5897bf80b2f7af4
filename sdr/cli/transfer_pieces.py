"""A file as reliable messages: mapped in memory, cut into pieces, counted as verified.

The sender maps its file; the receiver receives into a ring of reused buffers and
writes each piece out once verified (:mod:`~sdr.cli.transfer_ring`; into its file's
mapping only where two messages do not fit the ring). The file moves as messages of
``message_size`` bytes and only the bytes of messages that completed and were verified
count. The pieces are posted a window at a time (:class:`PieceWindow`), so
what a side holds stays the same for a 1 KiB and a 1 TiB file.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from sdr.errors import SDRError
from sdr.units import format_size

__all__ = ["PieceWindow", "arrived", "map_file", "pieces", "with_arrived"]


REPORT_EVERY_S = 0.05
"""How often :meth:`PieceWindow.advance` reports progress (it runs every progress round;
a bar needs no more, and the round needs the time)."""


def pieces(size: int, message: int, tail: int = 0) -> Iterator[tuple[int, int]]:
    """(offset, length) of each message of a ``size``-byte file, in order: pieces of
    ``message`` bytes, and with ``tail`` the file's last ``tail`` bytes as one more piece
    of their own (:mod:`~sdr.cli.transfer_tail`)."""
    bulk = size - tail
    yield from ((off, min(message, bulk - off)) for off in range(0, bulk, message))
    if tail:
        yield (bulk, tail)


def map_file(fh: BinaryIO, size: int, write: bool) -> Any:
    """The ``size`` bytes of the open file ``fh`` as a buffer. ``write``: the receiver's
    output (already ``size`` bytes, see :mod:`~sdr.cli.transfer_output`), written
    through; else the sender's input, mapped copy-on-write (writable, never saved)."""
    if size == 0:
        return bytearray(0)
    access = mmap.ACCESS_WRITE if write else mmap.ACCESS_COPY
    return mmap.mmap(fh.fileno(), size, access=access)


class PieceWindow:
    """The pieces of a ``size``-byte file posted as reliable messages, a window at a time.

    ``post(offset, length)`` posts one piece (``rqp.write`` or ``rqp.post_recv``) and
    returns its handle. At most ``depth`` handles are unfinished at once; :meth:`top_up`
    retires the finished ones (counting their verified bytes and scheme counters) and
    posts the next pieces. A depth of at least the reliable QP's ``max_in_flight`` on
    both sides keeps every write in flight that could be, so the window costs nothing
    in speed while memory stays independent of the file's size. The first failed
    message stops the posting (the transfer has failed). ``finished_count``, when given,
    counts the handles finished so far (``ReliableQP.finished_count``): a round in which
    it did not move looks at no handle. ``tail``: the last piece's bytes, cut apart from
    the others (:func:`pieces`). ``room``, when given, is how many more pieces may be posted
    besides the depth (the receiver's ring: :mod:`~sdr.cli.transfer_ring`).
    """

    def __init__(
        self,
        post: Callable[[int, int], Any],
        size: int,
        message: int,
        depth: int,
        finished_count: Callable[[], int] | None = None,
        tail: int = 0,
        room: Callable[[], int] | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"window depth must be >= 1, got {depth}")
        if not 0 <= tail <= min(size, message):
            raise ValueError(f"a tail of {tail} bytes does not fit {size} bytes in {message}")
        self.size = size
        self._post = post
        self._todo = pieces(size, message, tail)
        self._depth = depth
        self._open: list[Any] = []
        self._verified = 0
        self.stats: dict[str, int] = {}
        """Scheme counters of the messages retired so far, summed."""
        self.failed: Any | None = None
        """The first handle that failed, if any."""
        self._exhausted = size == 0
        self._reported_at = -float("inf")
        self._finished_count = finished_count
        self._seen = -1  # finished_count() when the handles were last looked at
        self._room = room
        self.top_up()

    @property
    def open(self) -> int:
        """Handles posted and not retired yet (never more than the depth)."""
        return len(self._open)

    def top_up(self) -> None:
        """Retire the finished handles, then post pieces until the window is full."""
        if self._finished_count is None or self._finished_count() != self._seen:
            self._retire()
        while self.failed is None and not self._exhausted and len(self._open) < self._depth:
            if self._room is not None and self._room() < 1:
                break
            piece = next(self._todo, None)
            if piece is None:
                self._exhausted = True
                break
            self._open.append(self._post(*piece))

    def _retire(self) -> None:
        if self._finished_count is not None:
            self._seen = self._finished_count()
        still = []
        for handle in self._open:
            if not handle.finished:
                still.append(handle)
                continue
            for key, value in handle.stats.items():
                self.stats[key] = self.stats.get(key, 0) + value
            if handle.done:
                self._verified += handle.length
            elif self.failed is None:
                self.failed = handle
        self._open = still

    def advance(self, progress: Callable[[int, int], None] | None) -> bool:
        """:meth:`top_up`, then ``progress(verified, size)`` at most every
        :data:`REPORT_EVERY_S` (and once more when done); returns :attr:`finished`."""
        self.top_up()
        done = self.finished
        if progress is not None:
            now = time.monotonic()
            if done or now >= self._reported_at + REPORT_EVERY_S:
                self._reported_at = now
                progress(self.verified(), self.size)
        return done

    @property
    def finished(self) -> bool:
        """Every piece completed, or one failed (after :meth:`top_up`)."""
        return self.failed is not None or (self._exhausted and not self._open)

    def verified(self) -> int:
        """Bytes of the messages that completed and were verified (never failed ones)."""
        return self._verified + sum(h.length for h in self._open if h.done)

    def check(self) -> None:
        """Raise the error of the first failed message, if one failed."""
        if self.failed is not None:
            self.failed._check()


def arrived(verified: int, size: int) -> str:
    return f"{format_size(verified)} of {format_size(size)} verified"


def with_arrived(exc: SDRError, window: PieceWindow) -> SDRError:
    """``exc`` again (same type), its message saying how much of the file was verified."""
    return type(exc)(f"{exc} ({arrived(window.verified(), window.size)})")
