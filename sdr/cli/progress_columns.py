"""Progress-bar columns the transfer commands share: speed in binary units (MiB/s, like
the sizes beside it) over a sliding window of verified bytes."""

from __future__ import annotations

from collections import deque

from rich.progress import ProgressColumn, Task
from rich.text import Text

from sdr.units import format_size

__all__ = ["SPEED_WINDOW_S", "WindowSpeed", "BinarySpeed"]

SPEED_WINDOW_S = 2.0
"""The speed shown is the verified bytes of the last this many seconds, per second."""


class WindowSpeed:
    """Verified bytes per second over the last :data:`SPEED_WINDOW_S` s.

    Fed with (time, bytes done) as the transfer advances; the first sample (0 bytes at
    the start) anchors the window, so a speed is known from the first verified message.
    """

    def __init__(self, window: float = SPEED_WINDOW_S) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, done: int) -> float | None:
        """Record ``done`` bytes at ``now`` (monotonic s); the speed in bytes/s (None
        before the first verified bytes). A stalled transfer's speed falls to 0."""
        samples = self._samples
        if not samples or done != samples[-1][1]:
            samples.append((now, done))
        while len(samples) > 1 and now - samples[1][0] >= self.window:
            samples.popleft()  # samples[0] stays as the anchor just before the window
        t0, d0 = samples[0]
        if done == 0 or now <= t0:
            return None
        return (done - d0) / (now - t0)


class BinarySpeed(ProgressColumn):
    """Transfer speed in binary units (MiB/s), like the sizes beside it: the task's
    ``speed`` field (a :class:`WindowSpeed`), ``?`` before the first verified bytes."""

    def render(self, task: Task) -> Text:
        speed = task.fields.get("speed")
        text = "?" if speed is None else f"{format_size(speed)}/s"
        return Text(text, style="progress.data.speed")
