"""Small sans-I/O estimators the controllers share: an ACK-rate meter, windowed max/min.

All take ``now`` (seconds) from the caller; none reads a clock.
"""

from __future__ import annotations

from collections import deque

__all__ = ["AckRate", "WindowedExtreme"]


class AckRate:
    """Bits/s at which ACKs covered bytes over about the last ``window`` seconds.

    With the sender pacing, the ACK arrival rate is the delivery rate the receiver saw
    (what BBR's delivery-rate samples measure, without per-packet send records). It keeps
    a checkpoint every ``window/16``, so memory is bounded whatever the packet rate.
    """

    def __init__(self, window: float = 0.0) -> None:
        self.window = window
        self._points: deque[tuple[float, float]] = deque()  # (time, delivered bytes)

    def on_ack(self, now: float, delivered: float) -> None:
        """Record the cumulative ``delivered`` bytes at ``now``."""
        points = self._points
        if not points or now - points[-1][0] >= self.window / 16:
            points.append((now, delivered))
        else:
            points[-1] = (points[-1][0], delivered)
        while len(points) > 2 and now - points[1][0] >= self.window:
            points.popleft()

    def rate(self, now: float) -> float | None:
        """The rate over the window in bits/s, or None before a window's worth of ACKs."""
        points = self._points
        if len(points) < 2 or self.window <= 0:
            return None
        t0, d0 = points[0]
        t1, d1 = points[-1]
        span = t1 - t0
        if span < 0.5 * self.window:
            return None
        return 8.0 * (d1 - d0) / span


class WindowedExtreme:
    """The max (or min) of samples within the last ``window`` units (time or rounds).

    A monotonic deque: O(1) amortized per sample, exact over the window.
    """

    def __init__(self, window: float, *, largest: bool = True) -> None:
        self.window = window
        self._largest = largest
        self._items: deque[tuple[float, float]] = deque()  # (stamp, value), monotonic

    def update(self, stamp: float, value: float) -> float:
        """Add ``value`` at ``stamp``; return the extreme over the window."""
        items = self._items
        if self._largest:
            while items and items[-1][1] <= value:
                items.pop()
        else:
            while items and items[-1][1] >= value:
                items.pop()
        items.append((stamp, value))
        while items[0][0] <= stamp - self.window:
            items.popleft()
        return items[0][1]

    def get(self) -> float | None:
        """The current extreme (None when empty)."""
        return self._items[0][1] if self._items else None

    def reset(self, stamp: float, value: float) -> None:
        """Forget everything; start again from ``value`` at ``stamp``."""
        self._items.clear()
        self._items.append((stamp, value))
