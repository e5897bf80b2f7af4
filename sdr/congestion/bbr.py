"""``bbr``: a model-based controller in the style of BBR (version 1).

Cardwell et al., "BBR: Congestion-Based Congestion Control" (ACM Queue 14(5), 2016) and
the IETF draft draft-cardwell-iccrg-bbr-congestion-control: estimate the bottleneck
bandwidth (a windowed **max** of delivery-rate samples over ``bw_rounds`` round trips)
and the propagation delay (a windowed **min** RTT over ``min_rtt_window`` seconds), pace
at ``gain x bandwidth`` and cap the bytes in flight at ``cwnd_gain x BDP``:

- STARTUP: gain 2/ln 2 until the bandwidth estimate stops growing by 25% for 3 rounds;
- DRAIN: gain ln 2 / 2 until what is in flight is down to one BDP;
- PROBE_BW: the gain cycle 1.25, 0.75, 1, 1, 1, 1, 1, 1, one phase per min RTT (the phase
  it starts from is drawn from ``seed``, as BBR draws it, so flows do not probe in step);
- PROBE_RTT: when the min RTT is ``min_rtt_window`` old, 4 packets in flight for
  ``probe_rtt_time`` (at least a round) so the min RTT is measured again.

Loss is ignored unless a round loses more than ``loss_threshold`` of what it delivered;
then the bandwidth estimate restarts from the latest delivery-rate sample, but never from
less than ``loss_beta`` (0.7) x the estimate before it: BBRv2's bounded cut
(``bw_lo = max(bw_latest, beta x bw_lo)``), its point that a very lossy round means the
model is wrong without its full machinery. A round whose ACKs stopped (an outage, a
forged SACK) has a sample near 0; resetting to it left the sender pacing at a trickle
that the gain cycle's 1.25x per cycle took seconds to climb back from, or at 0. So a
lossy round costs at most 30%, a real capacity drop is followed in a few lossy rounds, and
the PROBE_BW cycle probes back up from there. Losses of data sent before that cut
(``sent_at``) do not count again. The estimate never falls under ``min_rate``.

RTT samples are filtered before the model sees them: the **median of the last three**
(with fewer, the largest), so one odd sample (a SACK held back by an outage, or a forged
one that "acknowledges" a packet microseconds after it left) moves neither the min-RTT
estimate nor the round length.

Differences from BBR, said plainly: delivery-rate samples are the ACK arrival rate over
about one RTT (:class:`~sdr.congestion.estimators.AckRate`), not per-packet send/ACK
records; rounds are timed by the latest RTT, not counted by delivered bytes; the pacing
rate never exceeds ``max_rate``.
"""

from __future__ import annotations

import math
import random
from typing import Any

from sdr.congestion.base import CongestionController
from sdr.congestion.estimators import WindowedExtreme
from sdr.errors import ConfigError

__all__ = ["BbrLike"]

HIGH_GAIN = 2 / math.log(2)
CYCLE = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
STARTUP, DRAIN, PROBE_BW, PROBE_RTT = "startup", "drain", "probe_bw", "probe_rtt"


class BbrLike(CongestionController):
    """BBR-style bandwidth and min-RTT model (see the module docstring).

    bw_rounds: rounds the max-bandwidth filter spans (BBR: 10).
    min_rtt_window: seconds before the min RTT is re-probed (BBR: 10 s).
    probe_rtt_time: seconds spent in PROBE_RTT (BBR: 0.2 s).
    cwnd_gain: bytes in flight in BDPs (BBR: 2).
    loss_threshold: a round's lost/(lost + delivered) above which the model is reset.
    loss_beta: the most a lossy round keeps of the estimate, at least (BBRv2: 0.7).
    min_rate: the floor in bits/s (see :class:`~sdr.congestion.base.CongestionController`).
    seed: draws the first PROBE_BW phase.
    """

    name = "bbr"

    def __init__(
        self,
        rate: float,
        *,
        max_rate: float | None = None,
        mtu: int = 4096,
        bw_rounds: int = 10,
        min_rtt_window: float = 10.0,
        probe_rtt_time: float = 0.2,
        cwnd_gain: float = 2.0,
        loss_threshold: float = 0.15,
        loss_beta: float = 0.7,
        min_rate: float | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(rate, max_rate=max_rate, mtu=mtu, min_rate=min_rate)
        if isinstance(bw_rounds, bool) or not isinstance(bw_rounds, int) or bw_rounds < 1:
            raise ConfigError(f"bw_rounds must be an integer >= 1, got {bw_rounds!r}")
        for name, value in (
            ("min_rtt_window", min_rtt_window),
            ("probe_rtt_time", probe_rtt_time),
            ("cwnd_gain", cwnd_gain),
        ):
            if not isinstance(value, int | float) or not 0 < value < 1e6:
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if not isinstance(loss_threshold, int | float) or not 0 < loss_threshold <= 1:
            raise ConfigError(f"loss_threshold must be in (0, 1], got {loss_threshold!r}")
        if isinstance(loss_beta, bool) or not isinstance(loss_beta, int | float):
            raise ConfigError(f"loss_beta must be a number in (0, 1), got {loss_beta!r}")
        if not 0 < loss_beta < 1:
            raise ConfigError(f"loss_beta must be a number in (0, 1), got {loss_beta!r}")
        self.loss_beta = float(loss_beta)
        self.min_rtt_window = float(min_rtt_window)
        self.probe_rtt_time = float(probe_rtt_time)
        self.cwnd_gain = float(cwnd_gain)
        self.loss_threshold = float(loss_threshold)
        self.mode = STARTUP
        self._bw = WindowedExtreme(bw_rounds, largest=True)
        self._rt_prop = math.inf
        self._rt_prop_stamp = 0.0
        self._round = 0
        self._round_start: float | None = None
        self._round_acked = 0.0
        self._round_lost = 0.0
        self._full_bw = 0.0
        self._full_count = 0
        self._cycle = random.Random(seed).choice([0, 2, 3, 4, 5, 6, 7])
        self._phase_start = 0.0
        self._probe_rtt_end = 0.0
        self._after_probe_rtt = PROBE_BW
        self._loss_reset = -math.inf
        self._rtts: list[float] = []  # the last raw RTT samples (median of three)
        self.filtered_rtt: float | None = None
        """The latest filtered RTT sample (seconds): what rounds and the min RTT use."""

    # --- the model --------------------------------------------------------------------
    @property
    def bandwidth(self) -> float:
        """The bottleneck bandwidth estimate in bits/s (the configured rate before any;
        never under ``min_rate``)."""
        value = self._bw.get()
        return self.rate if value is None else max(self.min_rate, value)

    @property
    def rt_prop(self) -> float:
        """The propagation-delay estimate in seconds (inf before any RTT sample)."""
        return self._rt_prop

    @property
    def bdp(self) -> float:
        """Bandwidth x propagation delay in bytes (inf before an RTT sample)."""
        return self.bandwidth / 8 * self._rt_prop

    @property
    def pacing_gain(self) -> float:
        if self.mode == STARTUP:
            return HIGH_GAIN
        if self.mode == DRAIN:
            return 1 / HIGH_GAIN
        if self.mode == PROBE_RTT:
            return 1.0
        return CYCLE[self._cycle]

    @property
    def pacing_rate(self) -> float:
        return min(self.max_rate, max(self.min_rate, self.pacing_gain * self.bandwidth))

    @property
    def cwnd(self) -> float:
        if self.mode == PROBE_RTT:
            return 4.0 * self.mtu
        if not math.isfinite(self._rt_prop):
            return math.inf
        gain = HIGH_GAIN if self.mode == STARTUP else self.cwnd_gain
        return max(4.0 * self.mtu, gain * self.bdp + 3 * self.mtu)

    # --- events -----------------------------------------------------------------------
    def on_ack(self, now: float, acked_bytes: float, rtt_s: float | None = None) -> None:
        super().on_ack(now, acked_bytes, rtt_s)
        self._round_acked += acked_bytes
        if rtt_s is not None and rtt_s > 0 and math.isfinite(rtt_s):
            rtt_s = self.filtered_rtt = self._filtered(rtt_s)
            expired = now - self._rt_prop_stamp > self.min_rtt_window
            if expired and self.mode not in (PROBE_RTT, STARTUP) and math.isfinite(self._rt_prop):
                self._enter_probe_rtt(now)
            if rtt_s <= self._rt_prop or expired:
                self._rt_prop, self._rt_prop_stamp = rtt_s, now
        sample = self.ack_rate.rate(now)
        if sample is not None:  # never above the ceiling: one burst of ACKs is no path
            self._bw.update(self._round, min(sample, self.max_rate))
        self._advance_round(now)
        self._advance_mode(now)

    def on_loss(
        self,
        now: float,
        lost_bytes: float,
        random_hint: bool | None = None,
        sent_at: float | None = None,
    ) -> None:
        super().on_loss(now, lost_bytes, random_hint, sent_at)
        if sent_at is None or sent_at >= self._loss_reset:
            self._round_lost += lost_bytes

    def _filtered(self, rtt: float) -> float:
        """The median of the last three samples (with fewer, the largest of them)."""
        recent = self._rtts
        recent.append(rtt)
        if len(recent) > 3:
            del recent[0]
        return sorted(recent)[len(recent) // 2]

    # --- state machine ----------------------------------------------------------------
    def _advance_round(self, now: float) -> None:
        if self._round_start is None:
            self._round_start = now
            return
        rtt = self.filtered_rtt
        if rtt is None or now - self._round_start < rtt:
            return
        self._round += 1
        self._round_start = now
        total = self._round_acked + self._round_lost
        if total > 0 and self._round_lost / total > self.loss_threshold:
            sample = self.ack_rate.rate(now)
            # bounded: the sample (which a round without ACKs makes ~0), never less
            # than loss_beta of the estimate, never under the floor
            bw = self.bandwidth
            kept = max(self.loss_beta * bw, min(sample or 0.0, bw))
            self._bw.reset(self._round, max(self.min_rate, kept))
            self._loss_reset = now
        self._round_acked = self._round_lost = 0.0
        if self.mode == STARTUP:
            bw = self.bandwidth
            if bw >= 1.25 * self._full_bw:
                self._full_bw, self._full_count = bw, 0
            else:
                self._full_count += 1
                if self._full_count >= 3:
                    self.mode = DRAIN

    def _advance_mode(self, now: float) -> None:
        if self.mode == DRAIN and self.in_flight <= self.bdp:
            self.mode, self._phase_start = PROBE_BW, now
        elif self.mode == PROBE_BW and now - self._phase_start >= self._rt_prop:
            self._cycle = (self._cycle + 1) % len(CYCLE)
            self._phase_start = now
        elif self.mode == PROBE_RTT and now >= self._probe_rtt_end:
            self.mode, self._phase_start = self._after_probe_rtt, now

    def _enter_probe_rtt(self, now: float) -> None:
        self._after_probe_rtt = PROBE_BW if self.mode in (PROBE_BW, DRAIN) else self.mode
        self.mode = PROBE_RTT
        self._probe_rtt_end = now + max(self.probe_rtt_time, self.filtered_rtt or 0.0)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "mode": self.mode, "bandwidth": self.bandwidth}
