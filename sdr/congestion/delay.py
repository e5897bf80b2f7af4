"""``delay``: a delay-based controller in the spirit of Swift and TIMELY.

Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
Datacenter" (SIGCOMM 2020) and Mittal et al., "TIMELY: RTT-based Congestion Control for
the Datacenter" (SIGCOMM 2015): the queueing delay (RTT above the minimum RTT) is the
congestion signal, not loss. Here the control variable is a pacing rate (SDR paces).

:class:`DelayBased` composes three machines, one idea each, and feeds every RTT sample
through them in this order (each module's docstring has its rules):

- the **host-noise filter** (:class:`~sdr.congestion.delay_noise.RttNoiseFilter`,
  ``delay_noise.py``): a median of three, the standing RTT, the minimum RTT and a target
  that grows above the hosts' measured noise;
- the **competing-mode detector**
  (:class:`~sdr.congestion.delay_competing.CompetingDetector`, ``delay_competing.py``):
  whether a buffer-filling flow keeps a standing queue that no cut of ours drains, and
  then the baseline the queue is measured from (the last window's smallest RTT instead of
  the all-time one);
- the **rate rule** (:class:`~sdr.congestion.delay_rate.RateRule`, ``delay_rate.py``):
  additive increase under the target (hyperactive after calm rounds), Swift's
  multiplicative decrease over it at most once per RTT, held to the delivery rate when the
  queue is clearly over the target, and a loss response only for congestion: random
  long-haul loss, which comes without queueing delay, is ignored.

The queueing delay is the standing RTT minus that baseline (``queue_delay``); the loss
response reads the latest one. The controller keeps the rate, the window and the
configuration checks; the parts keep their own state, and the attributes the controller
had before it was split (``base_rtt``, ``noise``, ``competing``, ``decreases``, the
parameters) read and write the part that keeps them.

The window ``cwnd`` is ``cwnd_gain`` BDPs at the current rate: a safety net when ACKs stop.
The controller starts at the configured ``rate`` (as ``fixed`` does), so a transfer on an
idle link loses nothing to a slow start.
"""

from __future__ import annotations

import math
from typing import Any, Generic, TypeVar, overload

from sdr.congestion.base import CongestionController
from sdr.congestion.delay_competing import CompetingDetector
from sdr.congestion.delay_noise import RttNoiseFilter
from sdr.congestion.delay_rate import RateRule
from sdr.errors import ConfigError
from sdr.units import parse_time

__all__ = ["DelayBased"]

# The smallest window, in packets: at a tiny rate x RTT the window still holds a few
# packets, so it never shrinks to one or two that a held-back ACK would stall.
K_MIN_CWND_PACKETS = 4.0
# The largest queueing-delay target (and target_min) a configuration may ask for, in
# seconds: a minute of queue is no target anyone means, so a larger one is a mistake
# (milliseconds written as seconds, say) to report.
K_MAX_TARGET_S = 60.0
# The largest value of a multiple or a count (hai_max, compete_rtts, compete_factor,
# standing_samples): far beyond any tuning, so a larger one is a mistake to report.
K_MAX_MULTIPLE = 1000.0
# The largest gain (cwnd_gain, standing_rtts, noise_gain), for the same reason.
K_MAX_GAIN = 100.0
# The largest cut (max_mdf, loss_beta): a cut of 100% would leave nothing to probe with.
K_MAX_CUT = 0.99

T = TypeVar("T")


class _OnPart(Generic[T]):
    """A controller attribute kept by one of its parts: reads and writes of
    ``controller.<name>`` go to ``controller.<part>.<name>``."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _OnPart[T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> _OnPart[T] | T:
        if obj is None:
            return self
        value: T = getattr(getattr(obj, self.part), self.name)
        return value

    def __set__(self, obj: object, value: T) -> None:
        setattr(getattr(obj, self.part), self.name, value)


def _fraction(name: str, value: object, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= high:
        raise ConfigError(f"{name} must be a number in (0, {high}], got {value!r}")
    return float(value)


def _count(name: str, value: object, expected: str, high: float) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ConfigError(f"{name} must be an integer {expected}, got {value!r}")
    return value


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

    Its parts are public: :attr:`rtt_filter`, :attr:`detector`, :attr:`rate_rule`.
    """

    name = "delay"

    # kept by the host-noise filter
    target = _OnPart[float | None]("rtt_filter")
    target_fraction = _OnPart[float]("rtt_filter")
    target_min = _OnPart[float]("rtt_filter")
    standing_samples = _OnPart[int]("rtt_filter")
    standing_rtts = _OnPart[float]("rtt_filter")
    noise_gain = _OnPart[float]("rtt_filter")
    target_max_fraction = _OnPart[float]("rtt_filter")
    base_rtt = _OnPart[float]("rtt_filter")
    """The smallest filtered RTT sample: the path's delay without host noise."""
    noise = _OnPart[float]("rtt_filter")
    """Mean jump between consecutive samples (seconds): the host's noise."""
    # kept by the competing-mode detector
    compete_rtts = _OnPart[float]("detector")
    compete_factor = _OnPart[float]("detector")
    stuck_windows = _OnPart[int]("detector")
    competing = _OnPart[bool]("detector")
    """True while a standing queue that is not ours is measured around (see above)."""
    # kept by the rate rule
    ai = _OnPart[float]("rate_rule")
    hai_max = _OnPart[float]("rate_rule")
    beta = _OnPart[float]("rate_rule")
    max_mdf = _OnPart[float]("rate_rule")
    loss_beta = _OnPart[float]("rate_rule")
    decreases = _OnPart[int]("rate_rule")
    """How many times the rate was cut (delay or loss): for tests and logs."""

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
        if target is not None and not (
            isinstance(target, int | float) and 0 < target < K_MAX_TARGET_S
        ):
            raise ConfigError(
                f"target must be a queueing delay in (0, {K_MAX_TARGET_S:g}) s, got {target!r}"
            )
        # checked in the order they always were: a configuration with several mistakes
        # names the same one first
        target_fraction = _fraction("target_fraction", target_fraction)
        target_min = _fraction("target_min", target_min, K_MAX_TARGET_S)
        ai = _fraction("ai", ai)
        hai_max = _fraction("hai_max", hai_max, K_MAX_MULTIPLE)
        beta = _fraction("beta", beta)
        max_mdf = _fraction("max_mdf", max_mdf, K_MAX_CUT)
        loss_beta = _fraction("loss_beta", loss_beta, K_MAX_CUT)
        compete_rtts = _fraction("compete_rtts", compete_rtts, K_MAX_MULTIPLE)
        compete_factor = _fraction("compete_factor", compete_factor, K_MAX_MULTIPLE)
        self.cwnd_gain = _fraction("cwnd_gain", cwnd_gain, K_MAX_GAIN)
        standing_rtts = _fraction("standing_rtts", standing_rtts, K_MAX_GAIN)
        noise_gain = _fraction("noise_gain", noise_gain, K_MAX_GAIN)
        target_max_fraction = _fraction("target_max_fraction", target_max_fraction)
        in_range = f"in [1, {K_MAX_MULTIPLE:g}]"
        standing_samples = _count("standing_samples", standing_samples, in_range, K_MAX_MULTIPLE)
        stuck_windows = _count("stuck_windows", stuck_windows, ">= 1", math.inf)
        self.rtt_filter = RttNoiseFilter(
            target=target,
            target_fraction=target_fraction,
            target_min=target_min,
            standing_samples=standing_samples,
            standing_rtts=standing_rtts,
            noise_gain=noise_gain,
            target_max_fraction=target_max_fraction,
        )
        """Raw RTT samples -> the standing RTT, the minimum RTT, the target."""
        self.detector = CompetingDetector(
            compete_rtts=compete_rtts, compete_factor=compete_factor, stuck_windows=stuck_windows
        )
        """Competing mode, and the baseline the queueing delay is measured from."""
        self.rate_rule = RateRule(
            ai=ai,
            hai_max=hai_max,
            beta=beta,
            max_mdf=max_mdf,
            loss_beta=loss_beta,
            max_rate=self.max_rate,
            min_rate=self.min_rate,
            delivery=self.ack_rate,
        )
        """The next pacing rate from the current one."""
        self._rate = self.rate
        self.queue_delay = 0.0
        """The latest queueing-delay sample (seconds above the baseline RTT)."""

    @property
    def target_delay(self) -> float:
        """The queueing-delay target in seconds."""
        return self.rtt_filter.target_delay

    @property
    def pacing_rate(self) -> float:
        return self._rate

    @property
    def cwnd(self) -> float:
        base_rtt = self.rtt_filter.base_rtt
        if not math.isfinite(base_rtt):
            return math.inf
        detector = self.detector
        base = max(base_rtt, detector.floor if detector.competing else 0.0)
        return max(K_MIN_CWND_PACKETS * self.mtu, self.cwnd_gain * self._rate / 8 * base)

    def on_ack(self, now: float, acked_bytes: float, rtt_s: float | None = None) -> None:
        super().on_ack(now, acked_bytes, rtt_s)
        if rtt_s is None or rtt_s <= 0 or self.srtt is None:
            return
        srtt, noise_filter = self.srtt, self.rtt_filter
        rtt, standing = noise_filter.on_rtt(now, rtt_s, srtt)
        base_rtt, target = noise_filter.base_rtt, noise_filter.target_delay
        self.detector.on_rtt(
            now,
            rtt,
            srtt=srtt,
            base_rtt=base_rtt,
            target=target,
            decreases=self.rate_rule.decreases,
        )
        q = max(0.0, standing - self.detector.baseline(base_rtt))
        self.queue_delay = q
        self._rate = self.rate_rule.on_delay(
            self._rate,
            now,
            acked_bytes=acked_bytes,
            q=q,
            target=target,
            rtt=rtt,
            srtt=srtt,
            base_rtt=base_rtt,
        )

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
        self._rate = self.rate_rule.on_loss(
            self._rate,
            now,
            congestion=random_hint is False,
            q=self.queue_delay,
            target=self.rtt_filter.target_delay,
            rtt=self.latest_rtt if self.latest_rtt is not None else 0.0,
            base_rtt=self.rtt_filter.base_rtt,
            sent_at=sent_at,
        )

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "queue_delay": self.queue_delay,
            "target": self.target_delay,
            "base_rtt": self.rtt_filter.base_rtt,
            "noise": self.rtt_filter.noise,
            "competing": self.detector.competing,
        }
