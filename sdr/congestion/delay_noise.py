"""The ``delay`` controller's host-noise filter: raw RTT samples in; a filtered sample, the
standing RTT, the minimum RTT and the queueing-delay target out.

**Host noise.** RTT samples measured by software carry the hosts' scheduling delay and the
receiver's ACK hold as well as the network's queue: on a 2-core host running both ends
and the link emulator, 1-11 ms (p10-p99) above the minimum with no queue at all, while
the default target on a 25 ms link is 1.25 ms. Three filters keep that out of the signal:

- a **median of three** consecutive samples feeds everything, so one sample alone (too
  high, or too low: a departure stamped late once made one 5.5 ms under the path's RTT)
  moves neither the minimum nor a decision;
- the queueing delay is the **standing RTT** (the smallest of the last
  ``standing_samples`` filtered samples, none older than ``standing_rtts`` x srtt: Copa's
  RTT_standing, counted in samples so that per-packet ACKs add no lag) minus the minimum:
  a real queue raises every sample of that window, noise only some. The window shrinks
  with the noise (to one sample when the noise is 0: no lag in a simulator);
- the target grows to ``noise_gain`` x the measured **noise** (the mean jump between
  consecutive samples: a queue grows or drains smoothly, a sample at a time, noise
  jumps), up to ``target_max_fraction`` x the minimum RTT. In a simulator or on
  quiet hosts the noise is near zero and the target is what it was.

Without noise the target is ``max(target_min, target_fraction x min RTT)`` (1.25 ms at
25 ms with the defaults), or the fixed ``target`` when one is configured. Sans-I/O: every
sample comes with its ``now``.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["RttNoiseFilter"]

# Consecutive samples whose median feeds everything: the fewest in which one odd sample,
# too high or too low, is outvoted; each more delays every decision by another sample.
K_MEDIAN_OF = 3
# The noise is a moving average of the jumps between samples with gain 1/32 (about the
# last 32 jumps: some three RTTs at the default SACK interval of rtt/10), so one burst of
# scheduling delay does not swing the target, while a host that turns busy shows soon.
K_NOISE_SAMPLES = 32


class RttNoiseFilter:
    """Raw RTT samples -> the filtered sample, the standing RTT, :attr:`base_rtt`,
    :attr:`noise` and :attr:`target_delay` (the module docstring has the rules).

    target: a fixed queueing-delay target in seconds; None derives it (the module
        docstring). target_fraction, target_min, noise_gain, target_max_fraction: that
        derivation's parameters. standing_samples, standing_rtts: the standing-RTT window.

    It takes checked values: :class:`~sdr.congestion.delay.DelayBased` validates its
    configuration and builds this.
    """

    def __init__(
        self,
        *,
        target: float | None,
        target_fraction: float,
        target_min: float,
        standing_samples: int,
        standing_rtts: float,
        noise_gain: float,
        target_max_fraction: float,
    ) -> None:
        self.target = target
        self.target_fraction = target_fraction
        self.target_min = target_min
        self.standing_samples = standing_samples
        self.standing_rtts = standing_rtts
        self.noise_gain = noise_gain
        self.target_max_fraction = target_max_fraction
        self.base_rtt = math.inf
        """The smallest filtered RTT sample: the path's delay without host noise."""
        self.noise = 0.0
        """Mean jump between consecutive samples (seconds): the host's noise."""
        self._recent: list[float] = []  # the last raw samples (the median's)
        self._standing: deque[tuple[float, float]] = deque()  # (time, filtered sample)

    @property
    def target_delay(self) -> float:
        """The queueing-delay target in seconds."""
        if self.target is not None:
            return self.target
        base = self.base_rtt if math.isfinite(self.base_rtt) else 0.0
        cap = self.target_max_fraction * base
        return max(self.base_target(), min(self.noise_gain * self.noise, cap))

    def base_target(self) -> float:
        """The target without noise: ``max(target_min, target_fraction x min RTT)``."""
        base = self.base_rtt if math.isfinite(self.base_rtt) else 0.0
        return max(self.target_min, self.target_fraction * base)

    def on_rtt(self, now: float, rtt: float, srtt: float) -> tuple[float, float]:
        """Take a raw sample (seconds, > 0) at ``now``, with the smoothed RTT ``srtt``;
        return (the filtered sample, the standing RTT)."""
        if self._recent:  # noise: how far one sample jumps from the last
            self.noise += (abs(rtt - self._recent[-1]) - self.noise) / K_NOISE_SAMPLES
        rtt = self._median(rtt)
        return rtt, self._standing_rtt(now, rtt, srtt)

    def _median(self, rtt: float) -> float:
        """The median of the last three samples; it also keeps :attr:`base_rtt` (from
        the third sample on: the first two are used as they are, and set no minimum)."""
        recent = self._recent
        recent.append(rtt)
        if len(recent) > K_MEDIAN_OF:
            del recent[0]
        if len(recent) == K_MEDIAN_OF:
            rtt = sorted(recent)[K_MEDIAN_OF // 2]
            self.base_rtt = min(self.base_rtt, rtt)
        return rtt

    def _standing_rtt(self, now: float, rtt: float, srtt: float) -> float:
        """The smallest of the last ``standing_samples`` filtered samples, none older
        than ``standing_rtts`` x srtt (a count, so per-packet ACKs add no lag)."""
        recent = self._standing
        recent.append((now, rtt))
        oldest = now - self.standing_rtts * srtt
        # as long as the noise needs: no filter (no lag) on a quiet host or in a simulator
        quiet = min(1.0, self.noise / self.base_target())
        keep = 1 + round((self.standing_samples - 1) * quiet)
        while len(recent) > keep or recent[0][0] < oldest:
            recent.popleft()
        return min(value for _, value in recent)
