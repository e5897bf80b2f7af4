"""The ``delay`` controller's rate rule: the next pacing rate from the current one, given
the queueing delay ``q`` and its target ``t`` (from ``delay_noise`` and
``delay_competing``).

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
  which comes without queueing delay, is ignored.

Every cut keeps the rate at or above ``min_rate``; an increase never passes ``max_rate``.
"""

from __future__ import annotations

import math

from sdr.congestion.estimators import AckRate

__all__ = ["RateRule"]

# Calm rounds in a row (no sample over the target) that still get the plain additive step;
# from the next one on it doubles per round. Right after a cut, near the operating point,
# the steps stay small; only a calm that lasts says there is spare capacity.
K_HAI_CALM_ROUNDS = 2
# The additive step doubles with each further calm round (TIMELY's hyperactive increase),
# up to hai_max times: spare capacity is found in a few rounds, not in 1/ai of them.
K_HAI_GROWTH = 2.0
# Calm rounds past which the boost stops growing: 2**64 is beyond any hai_max (at most
# 1000); unbounded, K_HAI_GROWTH ** rounds overflowed a float after about 1026 calm rounds
# (1.1 s on a 1 ms path) and on_ack raised OverflowError.
K_HAI_MAX_DOUBLINGS = 64
# A queue over this many targets is clearly over it, not near it: a loss then counts as
# congestion, and a cut also holds the rate to the delivery rate less a drain share.
K_CONGESTED_TARGETS = 2
# A decision holds while the queue is under this share of the one at the last decision:
# falling by a fifth per RTT (TIMELY's gradient), the last cut is already draining it.
K_HOLD_FALL = 0.8
# A decision comes before its RTT is up when the queue grew past this many times the one
# at the last decision (plus a target) while we still send faster than the bottleneck
# delivers: the last cut was too small (a capacity drop), and waiting doubles the queue.
K_QUEUE_GROWTH = 2
# A cut to the delivery rate leaves room to drain the excess queue in about this many
# minimum RTTs: the capacity drop is followed within a couple of RTTs (module docstring),
# and spread over two the drain share stays small.
K_DRAIN_RTTS = 2
# The drain share is at most half the delivery rate: the same bound as the largest cut
# per RTT (max_mdf's default), so one decision never paces under half of what the
# bottleneck delivers.
K_MAX_DRAIN = 0.5
# The smallest drain time in seconds (a microsecond): guards the division; with a minimum
# RTT that small the share is capped by K_MAX_DRAIN anyway.
K_MIN_DRAIN_S = 1e-6


class RateRule:
    """AIMD on the queueing delay (the module docstring): :meth:`on_delay` for each RTT
    sample, :meth:`on_loss` for each loss not known to be random. Both take the current
    rate and return the next one; the rule keeps the episode (last decision, calm rounds).

    ai, hai_max: the additive increase per RTT as a fraction of ``max_rate``, and its
        largest multiple. beta, max_mdf: Swift's decrease gain and largest cut per RTT.
    loss_beta: the cut for a congestion loss. max_rate, min_rate: the bounds, bits/s.
    delivery: the delivery-rate meter read when a cut is decided (the controller's
        ``ack_rate``).

    It takes checked values: :class:`~sdr.congestion.delay.DelayBased` validates its
    configuration and builds this.
    """

    def __init__(
        self,
        *,
        ai: float,
        hai_max: float,
        beta: float,
        max_mdf: float,
        loss_beta: float,
        max_rate: float,
        min_rate: float,
        delivery: AckRate,
    ) -> None:
        self.ai = ai
        self.hai_max = hai_max
        self.beta = beta
        self.max_mdf = max_mdf
        self.loss_beta = loss_beta
        self.max_rate = max_rate
        self.min_rate = min_rate
        self.delivery = delivery
        self.decreases = 0
        """How many times the rate was cut (delay or loss): for tests and logs."""
        self._last_decrease = -math.inf
        self._q_ref = 0.0  # queueing delay at the last decision (0: none this episode)
        self._round_start = 0.0
        self._calm = True  # no sample over the target this round
        self._calm_rounds = 0

    def on_delay(
        self,
        rate: float,
        now: float,
        *,
        acked_bytes: float,
        q: float,
        target: float,
        rtt: float,
        srtt: float,
        base_rtt: float,
    ) -> float:
        """The rate after a filtered sample ``rtt`` at ``now`` that acknowledged
        ``acked_bytes`` and measured the queueing delay ``q`` against ``target``."""
        if now - self._round_start >= srtt:  # hyperactive increase (TIMELY's HAI)
            self._calm_rounds = self._calm_rounds + 1 if self._calm else 0
            self._round_start, self._calm = now, True
        if q <= target:
            self._q_ref = 0.0
            doublings = min(max(0, self._calm_rounds - K_HAI_CALM_ROUNDS), K_HAI_MAX_DOUBLINGS)
            boost = min(self.hai_max, K_HAI_GROWTH**doublings)
            step = boost * self.ai * self.max_rate * (8.0 * acked_bytes) / (rate * srtt)
            return min(self.max_rate, rate + step)
        self._calm = False
        if now - self._last_decrease < rtt and not self._too_small(rate, now, q, target):
            return rate
        # a packet sent after the last decision: is the queue going down (hold) or not?
        if q < K_HOLD_FALL * self._q_ref:
            self._q_ref, self._last_decrease = q, now
            return rate
        rate = self._decrease(rate, now, q, target, rtt, base_rtt)
        self._q_ref = q
        return rate

    def on_loss(
        self,
        rate: float,
        now: float,
        *,
        congestion: bool,
        q: float,
        target: float,
        rtt: float,
        base_rtt: float,
        sent_at: float | None,
    ) -> float:
        """The rate after a loss at ``now`` of data sent at ``sent_at`` (None: unknown)
        that is not known to be random; ``congestion``: the caller says it is (else the
        queue ``q`` decides); ``rtt`` the latest raw sample (0 before one)."""
        congested = congestion or q > K_CONGESTED_TARGETS * target
        if sent_at is not None:
            fresh = sent_at >= self._last_decrease  # sent after the last reduction
        else:
            fresh = now - self._last_decrease >= rtt
        if not (congested and fresh):
            return rate
        rate = self._decrease(rate, now, q, target, rtt, base_rtt, loss=True)
        self._q_ref = q
        return rate

    def _too_small(self, rate: float, now: float, q: float, target: float) -> bool:
        """The last cut was too small: the queue doubled since and we still send faster
        than the bottleneck delivers (a capacity drop)."""
        if q <= K_QUEUE_GROWTH * self._q_ref + target:
            return False
        measured = self.delivery.rate(now)
        return measured is not None and rate > measured

    def _decrease(
        self,
        rate: float,
        now: float,
        q: float,
        target: float,
        rtt: float,
        base_rtt: float,
        loss: bool = False,
    ) -> float:
        excess = max(0.0, q - target) / rtt if rtt > 0 else 0.0
        new = rate * max(1 - self.beta * excess, 1 - self.max_mdf)
        if loss:
            new = min(new, rate * (1 - self.loss_beta))
        if q > K_CONGESTED_TARGETS * target:
            measured = self.delivery.rate(now)
            if measured is not None:
                drain = min(K_MAX_DRAIN, (q - target) / max(K_DRAIN_RTTS * base_rtt, K_MIN_DRAIN_S))
                new = min(new, measured * (1 - drain))
        return self._cut(rate, now, new)

    def _cut(self, rate: float, now: float, new: float) -> float:
        self._last_decrease = now
        self.decreases += 1
        return max(self.min_rate, min(rate, new))
