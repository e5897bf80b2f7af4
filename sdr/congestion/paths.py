"""Multipath: per-path RTT and loss accounting and PLB-style moves off a bad path.

A path is one UDP source port of a connection (the ECMP entropy RoCEv2 uses: switches
hash the 5-tuple, so distinct source ports tend to take distinct routes). The selector
is told what was sent on each path, what was acknowledged (with RTT samples) and what was
lost; it keeps per path an EWMA of the RTT, the minimum RTT and an EWMA of the loss
fraction per round, and hands out weights and the next path to send on.

PLB (Qureshi et al., "PLB: Congestion Signals are Simple and Effective for Network Load
Balancing", SIGCOMM 2022) repaths a flow after a few consecutive congested rounds. Here,
once per round (the best path's smoothed RTT), a path is **worse** when its smoothed or
its minimum RTT exceeds ``rtt_ratio`` x the reference path's, or the fraction it lost in this round
exceeds ``loss_ratio`` x the reference's in this round plus ``loss_margin``; the
reference is the lower median of the measured paths (the best of two, the second best of
three or four), so congestion drops on the good paths, or one lucky path without any, do
not make the others look bad, and a burst of drops is one worse round, not the dozen an
EWMA would remember it for. After ``bad_rounds`` worse rounds in a row it is moved
off: its weight drops to ``probe_weight`` (it keeps a trickle, so it is still measured).
It comes back after ``good_rounds`` rounds in a row inside the tighter band
(``rtt_back``, half the loss margin): the hysteresis. The best path is never moved off.

A single congestion controller per connection can be fed RTT samples from every path
through :meth:`PathSelector.normalized_rtt`, which removes the difference in propagation
delay between paths, so a longer path is not read as queueing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sdr.errors import ConfigError

__all__ = ["PathSelector", "PathStats"]


@dataclass
class PathStats:
    """What the selector knows of one path (seconds, bytes, fractions)."""

    srtt: float | None = None
    min_rtt: float = math.inf
    loss: float = 0.0
    """EWMA over rounds of lost / (lost + acknowledged) bytes."""
    active: bool = True
    worse_rounds: int = 0
    better_rounds: int = 0
    sent: float = 0.0
    acked: float = 0.0
    lost: float = 0.0
    round_acked: float = 0.0
    round_lost: float = 0.0
    credit: float = field(default=0.0, repr=False)


class PathSelector:
    """Weights over ``paths`` paths, moved by delay and loss (see the module docstring)."""

    def __init__(
        self,
        paths: int,
        *,
        gain: float = 0.125,
        rtt_ratio: float = 1.5,
        rtt_back: float = 1.2,
        loss_ratio: float = 3.0,
        loss_margin: float = 2e-3,
        bad_rounds: int = 3,
        good_rounds: int = 10,
        probe_weight: float = 0.02,
    ) -> None:
        if isinstance(paths, bool) or not isinstance(paths, int) or not 1 <= paths <= 1 << 16:
            raise ConfigError(f"paths must be an integer in [1, 65536], got {paths!r}")
        if not 1 < rtt_back <= rtt_ratio:
            raise ConfigError(f"need 1 < rtt_back <= rtt_ratio, got {rtt_back!r}, {rtt_ratio!r}")
        if not 0 < gain <= 1 or not 0 < probe_weight < 1:
            raise ConfigError(f"gain, probe_weight must be in (0, 1], got {gain}, {probe_weight}")
        if bad_rounds < 1 or good_rounds < 1:
            raise ConfigError(f"bad/good_rounds must be >= 1, got {bad_rounds}, {good_rounds}")
        self.stats = [PathStats() for _ in range(paths)]
        self.gain = gain
        self.rtt_ratio, self.rtt_back = rtt_ratio, rtt_back
        self.loss_ratio, self.loss_margin = loss_ratio, loss_margin
        self.bad_rounds, self.good_rounds = bad_rounds, good_rounds
        self.probe_weight = probe_weight
        self.moves: list[tuple[float, int, bool]] = []
        """(now, path, active) for every move off (False) or back on (True)."""
        self._round_start: float | None = None

    # --- events -----------------------------------------------------------------------
    def on_sent(self, now: float, path: int, nbytes: float) -> None:
        """``nbytes`` left on ``path``."""
        self.stats[path].sent += nbytes

    def on_ack(self, now: float, path: int, acked_bytes: float, rtt_s: float | None) -> None:
        """``acked_bytes`` acknowledged on ``path``, with an RTT sample or None."""
        s = self.stats[path]
        s.acked += acked_bytes
        s.round_acked += acked_bytes
        if rtt_s is not None and rtt_s > 0:
            s.min_rtt = min(s.min_rtt, rtt_s)
            s.srtt = rtt_s if s.srtt is None else (1 - self.gain) * s.srtt + self.gain * rtt_s
        self._maybe_round(now)

    def on_loss(self, now: float, path: int, lost_bytes: float) -> None:
        """``lost_bytes`` declared lost on ``path``."""
        s = self.stats[path]
        s.lost += lost_bytes
        s.round_lost += lost_bytes
        self._maybe_round(now)

    # --- outputs ----------------------------------------------------------------------
    @property
    def weights(self) -> list[float]:
        """Share of traffic per path, summing to 1."""
        raw = [1.0 if s.active else self.probe_weight for s in self.stats]
        total = sum(raw)
        return [w / total for w in raw]

    def pick(self) -> int:
        """The path for the next packet: smooth weighted round robin over :attr:`weights`
        (deterministic, so no path gets a burst and no random source is needed)."""
        best, best_credit = 0, -math.inf
        for i, (s, w) in enumerate(zip(self.stats, self.weights, strict=True)):
            s.credit += w
            if s.credit > best_credit:
                best, best_credit = i, s.credit
        self.stats[best].credit -= 1.0
        return best

    def normalized_rtt(self, path: int, rtt_s: float) -> float:
        """``rtt_s`` on ``path`` as if it had the smallest propagation delay of all paths:
        what one controller per connection should be fed."""
        own = self.stats[path].min_rtt
        best = min(s.min_rtt for s in self.stats)
        if not math.isfinite(own) or not math.isfinite(best):
            return rtt_s
        return rtt_s - own + best

    # --- rounds -----------------------------------------------------------------------
    def _round_length(self) -> float | None:
        rtts = [s.srtt for s in self.stats if s.srtt is not None and s.active]
        return min(rtts) if rtts else None

    def _maybe_round(self, now: float) -> None:
        length = self._round_length()
        if length is None:
            return
        if self._round_start is None:
            self._round_start = now
            return
        if now - self._round_start < length:
            return
        self._round_start = now
        self._end_round(now)

    def _end_round(self, now: float) -> None:
        this_round: dict[int, float] = {}  # path -> lost / (lost + acked) in this round
        for i, s in enumerate(self.stats):
            total = s.round_acked + s.round_lost
            if total > 0:
                this_round[i] = s.round_lost / total
                s.loss = (1 - self.gain) * s.loss + self.gain * this_round[i]
            s.round_acked = s.round_lost = 0.0
        measured = [s for s in self.stats if s.srtt is not None]
        if len(measured) < 2:
            return
        # against the lower median path, not the best: congestion drops on the paths
        # that took a moved path's traffic (or one lucky path with no drop at all) must
        # not make every other path look bad; one bad path among most good ones still is
        middle = (len(measured) - 1) // 2
        best_rtt = sorted(s.srtt for s in measured if s.srtt is not None)[middle]
        best_min = sorted(s.min_rtt for s in measured)[middle]
        best_loss = sorted(s.loss for s in measured)[middle]
        fractions = sorted(this_round.values())
        round_ref = fractions[(len(fractions) - 1) // 2] if fractions else 0.0
        for i, s in enumerate(self.stats):
            if s.srtt is None:
                continue
            # loss: this round's own (a burst is one bad round, not many: the EWMA
            # remembers it for a dozen rounds), against this round's lower median path
            lossy = this_round.get(i, 0.0) > self.loss_ratio * round_ref + self.loss_margin
            # delay: smoothed (queueing too), or the minimum (a longer path shows at once,
            # where the smoothed RTT takes rounds to climb)
            slow = s.srtt > self.rtt_ratio * best_rtt or s.min_rtt > self.rtt_ratio * best_min
            worse = slow or lossy
            better = (
                s.srtt <= self.rtt_back * best_rtt
                and s.loss <= self.loss_ratio * best_loss + self.loss_margin / 2
            )
            s.worse_rounds = s.worse_rounds + 1 if worse else 0
            s.better_rounds = s.better_rounds + 1 if better else 0
            if s.active and s.worse_rounds >= self.bad_rounds:
                s.active = False
                self.moves.append((now, i, False))
            elif not s.active and s.better_rounds >= self.good_rounds:
                s.active = True
                self.moves.append((now, i, True))
        if not any(s.active for s in self.stats):  # never move off every path
            keep = min(range(len(self.stats)), key=lambda i: self.stats[i].srtt or math.inf)
            self.stats[keep].active = True
            self.moves.append((now, keep, True))
