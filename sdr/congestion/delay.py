"""``delay``: a delay-based controller in the spirit of Swift and TIMELY.

Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
Datacenter" (SIGCOMM 2020) and Mittal et al., "TIMELY: RTT-based Congestion Control for
the Datacenter" (SIGCOMM 2015): the queueing delay (RTT above the minimum RTT) is the
congestion signal, not loss. Here the control variable is a pacing rate (SDR paces), and:

- **additive increase** of ``ai x max_rate`` per RTT while the queueing delay is under the
  target (``target``, default ``max(target_min, target_fraction x min RTT)``), doubling
  after each further round without a sample over the target up to ``hai_max`` times
  (TIMELY's hyperactive increase: spare capacity is found fast, and near the target the
  steps stay small);
- **multiplicative decrease** proportional to the excess, ``rate x max(1 - beta (q - t) /
  rtt, 1 - max_mdf)`` (Swift's rule: the excess over the whole RTT, so on a long-haul
  link a small queue is a small cut), **at most once per RTT** (sooner only when the
  queue doubled since the last decision while the rate is still above the delivery
  rate: that cut was too small); when the
  queue is clearly over the target (``q > 2 t``) the new rate is also held at or below
  the measured delivery rate less the share needed to drain the excess queue in about two
  RTTs (TIMELY's and BBR's point: the ACK rate tells what the bottleneck gives us), so a
  capacity drop is followed within a couple of RTTs, not halved step by step; a later
  decision (again at most once per RTT) holds while the queue is still falling by a fifth
  per RTT (TIMELY's gradient), so the queue that a cut is already draining is not cut
  twice;
- **loss** cuts the rate (by at least ``loss_beta``, once per episode: only losses of data
  sent after the last reduction count) only when it comes with a grown queue (``q > 2 t``)
  or the caller says it is congestion (``random_hint=False``): random long-haul loss,
  which comes without queueing delay, is ignored;
- **competing mode**: a buffer-filling flow (Reno, CUBIC) keeps a standing queue that no
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

The window ``cwnd`` is ``cwnd_gain`` BDPs at the current rate: a safety net when ACKs stop.
The controller starts at the configured ``rate`` (as ``fixed`` does), so a transfer on an
idle link loses nothing to a slow start.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from sdr.congestion.base import CongestionController
from sdr.errors import ConfigError
from sdr.units import parse_time

__all__ = ["DelayBased"]


def _fraction(name: str, value: object, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= high:
        raise ConfigError(f"{name} must be a number in (0, {high}], got {value!r}")
    return float(value)


class DelayBased(CongestionController):
    """Rate-based AIMD on queueing delay (see the module docstring for the rules).

    target: queueing delay target in seconds; None derives it from the min RTT.
    target_fraction, target_min: the derived target, ``max(target_min, fraction x min RTT)``.
    ai: additive increase per RTT as a fraction of ``max_rate``; hai_max: the largest
        multiple of it after calm rounds (hyperactive increase).
    beta, max_mdf: Swift's decrease gain and largest decrease per RTT (0.5 = halve).
    loss_beta: the cut for a congestion loss.
    min_rate: floor in bits/s (default ``max_rate / 1000``).
    compete_rtts, compete_factor: the competing-mode detector (window, threshold).
    stuck_windows: windows of cuts that did not drain the queue before competing mode.
    cwnd_gain: the window in BDPs at the current rate.
    standing_samples, standing_rtts: the standing-RTT window: that many samples, none
        older than ``standing_rtts`` smoothed RTTs.
    noise_gain, target_max_fraction: the noise-aware target (``noise_gain`` x the
        samples' measured noise, at most ``target_max_fraction`` x the minimum RTT).
    """

    name = "delay"

    def __init__(
        self,
        rate: float,
        *,
        max_rate: float | None = None,
        mtu: int = 4096,
        target: float | str | None = None,
        target_fraction: float = 0.05,
        target_min: float = 0.5e-3,
        ai: float = 0.01,
        hai_max: float = 8.0,
        beta: float = 0.8,
        max_mdf: float = 0.5,
        loss_beta: float = 0.3,
        min_rate: float | None = None,
        compete_rtts: float = 8.0,
        compete_factor: float = 4.0,
        stuck_windows: int = 3,
        cwnd_gain: float = 2.0,
        standing_samples: int = 6,
        standing_rtts: float = 0.5,
        noise_gain: float = 2.0,
        target_max_fraction: float = 0.25,
    ) -> None:
        super().__init__(rate, max_rate=max_rate, mtu=mtu, min_rate=min_rate)
        if isinstance(target, str):  # a config's "10ms"
            target = parse_time(target, field="target")
        if target is not None and not (isinstance(target, int | float) and 0 < target < 60):
            raise ConfigError(f"target must be a queueing delay in (0, 60) s, got {target!r}")
        self.target = target
        self.target_fraction = _fraction("target_fraction", target_fraction)
        self.target_min = _fraction("target_min", target_min, 60.0)
        self.ai = _fraction("ai", ai)
        self.hai_max = _fraction("hai_max", hai_max, 1000.0)
        self.beta = _fraction("beta", beta)
        self.max_mdf = _fraction("max_mdf", max_mdf, 0.99)
        self.loss_beta = _fraction("loss_beta", loss_beta, 0.99)
        self.compete_rtts = _fraction("compete_rtts", compete_rtts, 1000.0)
        self.compete_factor = _fraction("compete_factor", compete_factor, 1000.0)
        self.cwnd_gain = _fraction("cwnd_gain", cwnd_gain, 100.0)
        self.standing_rtts = _fraction("standing_rtts", standing_rtts, 100.0)
        self.noise_gain = _fraction("noise_gain", noise_gain, 100.0)
        self.target_max_fraction = _fraction("target_max_fraction", target_max_fraction)
        self._recent: list[float] = []  # the last raw samples (median of three)
        if (
            isinstance(standing_samples, bool)
            or not isinstance(standing_samples, int)
            or not 1 <= standing_samples <= 1000
        ):
            raise ConfigError(
                f"standing_samples must be an integer in [1, 1000], got {standing_samples!r}"
            )
        self.standing_samples = standing_samples
        self._standing: deque[tuple[float, float]] = deque()  # (time, filtered sample)
        self.base_rtt = math.inf
        """The smallest filtered RTT sample: the path's delay without host noise."""
        self.noise = 0.0
        """Mean jump between consecutive samples (seconds): the host's noise."""
        self._rate = self.rate
        self._last_decrease = -math.inf
        self._q_ref = 0.0  # queueing delay at the last decision (0: none this episode)
        self._round_start = 0.0
        self._calm = True  # no sample over the target this round
        self._calm_rounds = 0
        self.queue_delay = 0.0
        """The latest queueing-delay sample (seconds above the baseline RTT)."""
        self.competing = False
        """True while a standing queue that is not ours is measured around (see above)."""
        self._win_start: float | None = None
        self._win_min = math.inf
        self._floor = math.inf
        self._high_windows = 0
        self._stuck_windows = 0
        self._win_decreases = 0
        self._entry_floor_q = 0.0  # the floor's queueing delay when competing mode began
        if (
            isinstance(stuck_windows, bool)
            or not isinstance(stuck_windows, int)
            or stuck_windows < 1
        ):
            raise ConfigError(f"stuck_windows must be an integer >= 1, got {stuck_windows!r}")
        self.stuck_windows = stuck_windows
        self.decreases = 0
        """How many times the rate was cut (delay or loss): for tests and logs."""

    @property
    def target_delay(self) -> float:
        """The queueing-delay target in seconds."""
        if self.target is not None:
            return self.target
        base = self.base_rtt if math.isfinite(self.base_rtt) else 0.0
        cap = self.target_max_fraction * base
        return max(self._base_target(), min(self.noise_gain * self.noise, cap))

    def _base_target(self) -> float:
        """The target without noise: ``max(target_min, target_fraction x min RTT)``."""
        base = self.base_rtt if math.isfinite(self.base_rtt) else 0.0
        return max(self.target_min, self.target_fraction * base)

    @property
    def pacing_rate(self) -> float:
        return self._rate

    @property
    def cwnd(self) -> float:
        if not math.isfinite(self.base_rtt):
            return math.inf
        base = max(self.base_rtt, self._floor if self.competing else 0.0)
        return max(4.0 * self.mtu, self.cwnd_gain * self._rate / 8 * base)

    def on_ack(self, now: float, acked_bytes: float, rtt_s: float | None = None) -> None:
        super().on_ack(now, acked_bytes, rtt_s)
        if rtt_s is None or rtt_s <= 0 or self.srtt is None:
            return
        if self._recent:  # noise: how far one sample jumps from the last
            self.noise += (abs(rtt_s - self._recent[-1]) - self.noise) / 32
        rtt_s = self._filtered(rtt_s)
        standing = self._standing_rtt(now, rtt_s)
        self._track_floor(now, rtt_s)
        base = self._floor if self.competing else self.base_rtt
        q = max(0.0, standing - base)
        self.queue_delay = q
        target = self.target_delay
        if now - self._round_start >= self.srtt:  # hyperactive increase (TIMELY's HAI)
            self._calm_rounds = self._calm_rounds + 1 if self._calm else 0
            self._round_start, self._calm = now, True
        if q <= target:
            self._q_ref = 0.0
            boost = min(self.hai_max, 2.0 ** max(0, self._calm_rounds - 2))
            step = boost * self.ai * self.max_rate * (8.0 * acked_bytes) / (self._rate * self.srtt)
            self._rate = min(self.max_rate, self._rate + step)
            return
        self._calm = False
        if now - self._last_decrease < rtt_s and not self._too_small(now, q, target):
            return
        # a packet sent after the last decision: is the queue going down (hold) or not?
        if q < 0.8 * self._q_ref:
            self._q_ref, self._last_decrease = q, now
        else:
            self._decrease(now, q, target, rtt_s)
            self._q_ref = q

    def _standing_rtt(self, now: float, rtt: float) -> float:
        """The smallest of the last ``standing_samples`` filtered samples, none older
        than ``standing_rtts`` x srtt (a count, so per-packet ACKs add no lag)."""
        recent = self._standing
        recent.append((now, rtt))
        assert self.srtt is not None
        oldest = now - self.standing_rtts * self.srtt
        # as long as the noise needs: no filter (no lag) on a quiet host or in a simulator
        quiet = min(1.0, self.noise / self._base_target())
        keep = 1 + round((self.standing_samples - 1) * quiet)
        while len(recent) > keep or recent[0][0] < oldest:
            recent.popleft()
        return min(value for _, value in recent)

    def _filtered(self, rtt: float) -> float:
        """The median of the last three samples; it also keeps :attr:`base_rtt` (from
        the third sample on: the first two are used as they are, and set no minimum)."""
        recent = self._recent
        recent.append(rtt)
        if len(recent) > 3:
            del recent[0]
        if len(recent) == 3:
            rtt = sorted(recent)[1]
            self.base_rtt = min(self.base_rtt, rtt)
        return rtt

    def _too_small(self, now: float, q: float, target: float) -> bool:
        """The last cut was too small: the queue doubled since and we still send faster
        than the bottleneck delivers (a capacity drop)."""
        if q <= 2 * self._q_ref + target:
            return False
        measured = self.ack_rate.rate(now)
        return measured is not None and self._rate > measured

    def on_loss(
        self,
        now: float,
        lost_bytes: float,
        random_hint: bool | None = None,
        sent_at: float | None = None,
    ) -> None:
        super().on_loss(now, lost_bytes, random_hint, sent_at)
        if random_hint:
            return
        target = self.target_delay
        congested = random_hint is False or self.queue_delay > 2 * target
        rtt = self.latest_rtt if self.latest_rtt is not None else 0.0
        if sent_at is not None:
            fresh = sent_at >= self._last_decrease  # sent after the last reduction
        else:
            fresh = now - self._last_decrease >= rtt
        if congested and fresh:
            self._decrease(now, self.queue_delay, target, rtt, loss=True)
            self._q_ref = self.queue_delay

    def _decrease(
        self, now: float, q: float, target: float, rtt: float, loss: bool = False
    ) -> None:
        excess = max(0.0, q - target) / rtt if rtt > 0 else 0.0
        new = self._rate * max(1 - self.beta * excess, 1 - self.max_mdf)
        if loss:
            new = min(new, self._rate * (1 - self.loss_beta))
        if q > 2 * target:
            measured = self.ack_rate.rate(now)
            if measured is not None:
                drain = min(0.5, (q - target) / max(2 * self.base_rtt, 1e-6))
                new = min(new, measured * (1 - drain))
        self._cut(now, new)

    def _cut(self, now: float, new: float) -> None:
        self._rate = max(self.min_rate, min(self._rate, new))
        self._last_decrease = now
        self.decreases += 1

    def _track_floor(self, now: float, rtt: float) -> None:
        """The competing-mode detector: the smallest RTT per window of compete_rtts RTTs."""
        if self._win_start is None:
            self._win_start = now
        self._win_min = min(self._win_min, rtt)
        assert self.srtt is not None
        if now - self._win_start < self.compete_rtts * self.srtt:
            return
        floor_q = self._win_min - self.base_rtt
        target = self.target_delay
        self._high_windows = self._high_windows + 1 if floor_q > self.compete_factor * target else 0
        # cuts that do not drain: we cut in this window and the queue never fell to the
        # target (a flow that joined a standing queue counts it in its minimum RTT, so
        # the floor stays just over the target however often it cuts)
        stuck = floor_q > target and self.decreases > self._win_decreases
        self._stuck_windows = self._stuck_windows + 1 if stuck else 0
        self._win_decreases = self.decreases
        if not self.competing and (
            self._high_windows >= 2 or self._stuck_windows >= self.stuck_windows
        ):
            self.competing = True
            self._entry_floor_q = floor_q
        elif self.competing and floor_q < min(2 * target, self._entry_floor_q / 2):
            self.competing = False  # the queue drained (half of what made us enter)
        self._floor = self._win_min
        self._win_start, self._win_min = now, math.inf

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "queue_delay": self.queue_delay,
            "target": self.target_delay,
            "base_rtt": self.base_rtt,
            "noise": self.noise,
            "competing": self.competing,
        }
