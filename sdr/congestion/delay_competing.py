"""The ``delay`` controller's competing-mode detector: is a standing queue that is not ours
on the path, and then what is the queueing delay measured from?

**Competing mode**: a buffer-filling flow (Reno, CUBIC) keeps a standing queue that no
cut of ours drains. When the smallest queueing delay over a window of ``compete_rtts``
RTTs stays above ``compete_factor x target`` for two windows, the controller measures
delay from the previous window's smallest RTT instead of the all-time one (the standing
queue is not its own) and keeps its loss response; it leaves the mode when a window's
floor comes back under twice the target. A second detector catches a flow that joined
a standing queue (its minimum RTT already holds the other flow's queue, so the floor
stays just over the target however often it cuts): ``stuck_windows`` windows in a row
in which it cut and the floor never fell to the target also enter the mode, since cuts
that do not drain the queue are not ours to make; the mode ends when the floor falls
under twice the target and under half of what it was at entry. (Copa's "competitive
mode", Arun and Balakrishnan, NSDI 2018, makes the same move with another detector.)

The detector sees the filtered samples (``delay_noise``), the target, and how many cuts
the rate rule (``delay_rate``) made; it decides nothing about the rate itself.
"""

from __future__ import annotations

import math

__all__ = ["CompetingDetector"]

# Windows in a row whose floor is over compete_factor x target before competing mode:
# one such window can be a burst (ours, or a flow passing by); two make a standing queue.
K_HIGH_WINDOWS = 2
# The mode ends when a window's floor is under this many targets (and under the entry
# floor over K_EXIT_SHRINK): twice the target is the rate rule's line between a queue near
# the target and one clearly over it (delay_rate.K_CONGESTED_TARGETS).
K_EXIT_TARGETS = 2
# ... and under the floor at entry divided by this: the standing queue that made us enter
# has halved, so it is going, not wobbling around the threshold that let us in.
K_EXIT_SHRINK = 2


class CompetingDetector:
    """The smallest RTT per window of ``compete_rtts`` RTTs; :attr:`competing` while a
    standing queue that is not ours is measured around (the module docstring).

    compete_rtts, compete_factor: the window (in srtts) and the threshold (in targets).
    stuck_windows: windows of cuts that did not drain the queue before competing mode.

    It takes checked values: :class:`~sdr.congestion.delay.DelayBased` validates its
    configuration and builds this.
    """

    def __init__(self, *, compete_rtts: float, compete_factor: float, stuck_windows: int) -> None:
        self.compete_rtts = compete_rtts
        self.compete_factor = compete_factor
        self.stuck_windows = stuck_windows
        self.competing = False
        """True while a standing queue that is not ours is measured around."""
        self.floor = math.inf
        """The last finished window's smallest filtered RTT (seconds; inf before one)."""
        self._win_start: float | None = None
        self._win_min = math.inf
        self._high_run = 0  # windows in a row with the floor over compete_factor x target
        self._stuck_run = 0  # windows in a row with cuts that did not drain the queue
        self._win_decreases = 0  # the rule's cut count when this window began
        self._entry_floor_q = 0.0  # the floor's queueing delay when competing mode began

    def baseline(self, base_rtt: float) -> float:
        """What the queueing delay is measured from: the last window's floor while
        competing, else ``base_rtt`` (the minimum RTT)."""
        return self.floor if self.competing else base_rtt

    def on_rtt(
        self, now: float, rtt: float, *, srtt: float, base_rtt: float, target: float, decreases: int
    ) -> None:
        """A filtered sample ``rtt`` at ``now``; ``decreases`` is how many cuts the rate
        rule made so far. At each window's end: enter or leave competing mode."""
        if self._win_start is None:
            self._win_start = now
        self._win_min = min(self._win_min, rtt)
        if now - self._win_start < self.compete_rtts * srtt:
            return
        floor_q = self._win_min - base_rtt
        self._high_run = self._high_run + 1 if floor_q > self.compete_factor * target else 0
        # cuts that do not drain: we cut in this window and the queue never fell to the
        # target (a flow that joined a standing queue counts it in its minimum RTT, so
        # the floor stays just over the target however often it cuts)
        stuck = floor_q > target and decreases > self._win_decreases
        self._stuck_run = self._stuck_run + 1 if stuck else 0
        self._win_decreases = decreases
        if not self.competing and (
            self._high_run >= K_HIGH_WINDOWS or self._stuck_run >= self.stuck_windows
        ):
            self.competing = True
            self._entry_floor_q = floor_q
        elif self.competing and floor_q < min(
            K_EXIT_TARGETS * target, self._entry_floor_q / K_EXIT_SHRINK
        ):
            self.competing = False  # the queue drained (half of what made us enter)
        self.floor = self._win_min
        self._win_start, self._win_min = now, math.inf
