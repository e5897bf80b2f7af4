"""Multipath: per-path RTT and loss accounting and PLB-style moves off a bad path.

A path is one UDP source port of a connection (the ECMP entropy RoCEv2 uses: switches
hash the 5-tuple, so distinct source ports tend to take distinct routes). The selector
is told what was sent on each path, what was acknowledged (with RTT samples) and what was
lost; it keeps per path an EWMA of the RTT, the minimum RTT and an EWMA of the loss
fraction per round, and hands out weights and the next path to send on.

PLB (Qureshi et al., "PLB: Congestion Signals are Simple and Effective for Network Load
Balancing", SIGCOMM 2022) repaths a flow after a few consecutive congested rounds. Here,
once per round (the best path's recent RTT, below), a path is **worse** when its recent
or its minimum RTT exceeds ``rtt_ratio`` x the reference path's, or the fraction it lost
in this round exceeds ``loss_ratio`` x the reference's in this round plus
``loss_margin``; the reference is the lower median of the measured paths (the best of
two, the second best of three or four), so congestion drops on the good paths, or one
lucky path without any, do not make the others look bad, and a burst of drops is one
worse round, not the dozen an EWMA would remember it for. A round in which nothing sent
on an active path was acknowledged or lost tells nothing of it and counts neither way;
for a moved-off path, whose trickle leaves most rounds silent, a silent round counts
toward its return when its books are inside the band (no new evidence against it: on
the emulator, returns that waited for evidence kept a 1% loss path off, and a
fixed-rate sender then overran the three good paths: 3.2-3.8 s where 2.4-2.6). After
``bad_rounds`` worse rounds in a row it is moved off: its weight drops to
``probe_weight`` (it keeps a trickle, so it is still measured). It comes back after
``good_rounds`` rounds in a row inside the tighter band (``rtt_back``, half the loss
margin): the hysteresis. The best path is never moved off.

**Liveness**, apart from that comparison (which needs a majority of good paths: with three
of four paths black-holed, the lower median is a dead path and nothing looks worse than
it). A path is **dead** once it has had ``dead_losses`` loss reports and no ACK for
``dead_rtos`` retransmission timeouts (``rto``, the sender's; without one, three of the
best path's smoothed RTTs), measured from its last ACK (or its first send), while
another live path was acknowledged within the last RTO: when every path goes quiet at once
(the link is out, or a host was descheduled) none is declared dead. A dead path is
also moved off, and gets no traffic (weight 0: data and repairs go to the live paths)
except a **probe**: one chunk sent for the first time (never a repair, which would be
lost again), after ``probe_rtos`` RTOs, then after twice as long after each probe that
brought no ACK, up to ``probe_max_rtos`` (through :meth:`PathSelector.pick` given ``now`` and
``probe=True``); its first ACK brings the path back, moved off (``probe_weight``) until
``good_rounds`` good rounds in a row return its share, so a path that answers a probe
now and then does not swing between dead and a full share. So the last live path is
never declared dead. A dead path takes no part in the rounds' comparisons.

**Host delay is not path delay.** A descheduled sender, receiver or forwarder delays
every packet in flight on every path, and the samples taken when it runs again can be ten
times the path's RTT (two busy loops beside a transfer on two cores showed 0.1-0.5 s on a
10 ms path). An EWMA of the samples (the smoothed RTT) climbs with each such sample and
takes a dozen samples to forget it, so whichever path had more samples in a stall looked
slow for several rounds and was moved off. The delay a path is judged by is therefore
the **recent RTT**: the smallest of its last ``window`` samples, a minimum filter as in
BBR's min RTT, which a stall cannot raise unless it covers the whole window, while a
standing queue or a longer route raises it at once. A path is judged by delay only once
it has ``window`` samples, and only against paths that have them too: the first samples
of a transfer (slow start's queue, a process still starting) move nothing.

A single congestion controller per connection can be fed RTT samples from every path
through :meth:`PathSelector.normalized_rtt`, which removes the difference in propagation
delay between paths, so a longer path is not read as queueing.
"""

from __future__ import annotations

import math
from collections import deque
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
    alive: bool = True
    """False while the path is declared dead (no ACK for ``dead_rtos`` RTOs, with losses)."""
    last_ack: float | None = None
    first_sent: float | None = None
    losses_since_ack: int = 0
    last_probe: float = -math.inf
    probe_wait: float = 0.0
    """RTOs until the next probe of a dead path (doubles after each unanswered one)."""
    credit: float = field(default=0.0, repr=False)
    recent: deque[float] = field(default_factory=deque, repr=False)
    """The last ``window`` RTT samples (see :attr:`PathSelector.window`)."""

    @property
    def recent_rtt(self) -> float | None:
        """The smallest of the recent samples: the path's delay without the host's."""
        return min(self.recent) if self.recent else None


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
        rto: float | None = None,
        dead_rtos: float = 2.0,
        dead_losses: int = 2,
        probe_rtos: float = 1.0,
        probe_max_rtos: float = 32.0,
        window: int = 8,
    ) -> None:
        if isinstance(paths, bool) or not isinstance(paths, int) or not 1 <= paths <= 1 << 16:
            raise ConfigError(f"paths must be an integer in [1, 65536], got {paths!r}")
        if not 1 < rtt_back <= rtt_ratio:
            raise ConfigError(f"need 1 < rtt_back <= rtt_ratio, got {rtt_back!r}, {rtt_ratio!r}")
        if not 0 < gain <= 1 or not 0 < probe_weight < 1:
            raise ConfigError(f"gain, probe_weight must be in (0, 1], got {gain}, {probe_weight}")
        if bad_rounds < 1 or good_rounds < 1:
            raise ConfigError(f"bad/good_rounds must be >= 1, got {bad_rounds}, {good_rounds}")
        if rto is not None and not (isinstance(rto, int | float) and 0 < rto < math.inf):
            raise ConfigError(f"rto must be a positive number of seconds or None, got {rto!r}")
        if not (isinstance(probe_max_rtos, int | float) and probe_max_rtos >= probe_rtos):
            raise ConfigError(f"probe_max_rtos must be >= probe_rtos, got {probe_max_rtos!r}")
        self.probe_max_rtos = float(probe_max_rtos)
        for name, value in (("dead_rtos", dead_rtos), ("probe_rtos", probe_rtos)):
            if not (isinstance(value, int | float) and 0 < value < math.inf):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"window must be an integer >= 1, got {window!r}")
        self.window = window
        """RTT samples a path's recent RTT is the minimum of (and it needs before its
        delay is judged)."""
        if isinstance(dead_losses, bool) or not isinstance(dead_losses, int) or dead_losses < 1:
            raise ConfigError(f"dead_losses must be an integer >= 1, got {dead_losses!r}")
        self.rto = None if rto is None else float(rto)
        self.dead_rtos, self.probe_rtos = float(dead_rtos), float(probe_rtos)
        self.dead_losses = dead_losses
        self.liveness: list[tuple[float, int, bool]] = []
        """(now, path, alive) for every path declared dead (False) or back (True)."""
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
        s = self.stats[path]
        s.sent += nbytes
        if s.first_sent is None:
            s.first_sent = now

    def on_ack(self, now: float, path: int, acked_bytes: float, rtt_s: float | None) -> None:
        """``acked_bytes`` acknowledged on ``path``, with an RTT sample or None."""
        s = self.stats[path]
        s.acked += acked_bytes
        s.round_acked += acked_bytes
        s.last_ack, s.losses_since_ack = now, 0
        if not s.alive:  # a probe got through: the path is back
            s.alive, s.credit = True, 0.0
            self.liveness.append((now, path, True))
        if rtt_s is not None and rtt_s > 0:
            s.min_rtt = min(s.min_rtt, rtt_s)
            s.recent.append(rtt_s)
            if len(s.recent) > self.window:
                s.recent.popleft()
            s.srtt = rtt_s if s.srtt is None else (1 - self.gain) * s.srtt + self.gain * rtt_s
        self._maybe_round(now)

    def on_loss(self, now: float, path: int, lost_bytes: float) -> None:
        """``lost_bytes`` declared lost on ``path``."""
        s = self.stats[path]
        s.lost += lost_bytes
        s.round_lost += lost_bytes
        s.losses_since_ack += 1
        self._check_alive(now, path)
        self._maybe_round(now)

    # --- liveness ---------------------------------------------------------------------
    def timeout(self) -> float | None:
        """The RTO liveness is measured in (seconds): ``rto``, else three of the best
        live path's smoothed RTTs (None before any RTT sample)."""
        if self.rto is not None:
            return self.rto
        srtts = [s.srtt for s in self.stats if s.srtt is not None and s.active and s.alive]
        return 3.0 * min(srtts) if srtts else None

    def _check_alive(self, now: float, path: int) -> None:
        s = self.stats[path]
        rto = self.timeout()
        if not s.alive or rto is None or s.losses_since_ack < self.dead_losses:
            return
        since = s.last_ack if s.last_ack is not None else s.first_sent
        if since is None or now - since < self.dead_rtos * rto:
            return
        # only against a live path that still hears ACKs: when every path went quiet
        # together (an outage of the link, a descheduled host), none is to blame
        heard = [
            o for i, o in enumerate(self.stats) if i != path and o.alive and o.last_ack is not None
        ]
        if not any(now - o.last_ack < rto for o in heard):  # type: ignore[operator]
            return
        s.alive, s.credit = False, 0.0
        s.last_probe, s.probe_wait = now, self.probe_rtos  # the first probe after that
        self.liveness.append((now, path, False))
        # dead is also moved off: a probe's ACK brings the path back on a trickle, and
        # only ``good_rounds`` good rounds give it its share again (else a lossy path
        # that answers a probe now and then would swing between dead and a full share)
        s.worse_rounds = s.better_rounds = 0
        if s.active:
            s.active = False
            self.moves.append((now, path, False))

    @property
    def alive(self) -> list[int]:
        """The paths not declared dead."""
        return [i for i, s in enumerate(self.stats) if s.alive]

    # --- outputs ----------------------------------------------------------------------
    @property
    def weights(self) -> list[float]:
        """Share of traffic per path, summing to 1 (0 for a dead path)."""
        raw = [(1.0 if s.active else self.probe_weight) if s.alive else 0.0 for s in self.stats]
        total = sum(raw)
        return [w / total for w in raw]

    def pick(self, now: float | None = None, probe: bool = False) -> int:
        """The path for the next packet: smooth weighted round robin over :attr:`weights`
        (deterministic, so no path gets a burst and no random source is needed). With
        ``probe`` (the packet may be lost at no extra cost: a chunk's first transmission)
        and ``now``, a dead path whose probe is due gets it."""
        rto = self.timeout()
        if probe and now is not None and rto is not None:
            for i, s in enumerate(self.stats):
                if not s.alive and now - s.last_probe >= s.probe_wait * rto:
                    s.last_probe = now
                    s.probe_wait = min(2 * s.probe_wait, self.probe_max_rtos)
                    return i
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
        # the best path's recent RTT, not its smoothed one: a host's stalls (which
        # the smoothed RTT keeps for a dozen samples) would stretch a round to a
        # large part of a transfer, and no path could have ``bad_rounds`` rounds
        # (a path has recent samples exactly when it has a smoothed RTT: one sample makes both)
        rtts = [min(s.recent) for s in self.stats if s.recent and s.active and s.alive]
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
        measured = [s for s in self.stats if s.srtt is not None and s.alive]
        if len(measured) < 2:
            return
        # against the lower median path, not the best: congestion drops on the paths
        # that took a moved path's traffic (or one lucky path with no drop at all) must
        # not make every other path look bad; one bad path among most good ones still is
        best_loss = _lower_median([s.loss for s in measured])
        fractions = [f for i, f in this_round.items() if self.stats[i].alive]
        round_ref = _lower_median(fractions) if fractions else 0.0
        # delay only between paths with a full window of samples (see the docstring)
        timed = [s for s in measured if len(s.recent) >= self.window]
        best_rtt = _lower_median([min(s.recent) for s in timed]) if len(timed) >= 2 else None
        best_min = _lower_median([s.min_rtt for s in timed]) if len(timed) >= 2 else None
        for i, s in enumerate(self.stats):
            if s.srtt is None or not s.alive:  # a dead path waits for its probe
                continue
            if s.active and i not in this_round:  # nothing of it resolved: no evidence
                continue  # either way (see the module docstring for a moved-off path)
            # loss: this round's own (a burst is one bad round, not many: the EWMA
            # remembers it for a dozen rounds), against this round's lower median path
            lossy = this_round.get(i, 0.0) > self.loss_ratio * round_ref + self.loss_margin
            # delay: the recent RTT (a standing queue), or the minimum (a longer path)
            recent = s.recent_rtt if len(s.recent) >= self.window else None
            slow = (
                recent is not None
                and best_rtt is not None
                and best_min is not None
                and (recent > self.rtt_ratio * best_rtt or s.min_rtt > self.rtt_ratio * best_min)
            )
            worse = slow or lossy
            better = (  # never in a worse round: else a path moved off for this round's
                not worse  # losses could count it among its good rounds and be back at once
                and (recent is None or best_rtt is None or recent <= self.rtt_back * best_rtt)
                and s.loss <= self.loss_ratio * best_loss + self.loss_margin / 2
            )
            s.worse_rounds = s.worse_rounds + 1 if worse else 0
            s.better_rounds = s.better_rounds + 1 if better else 0
            if s.active and s.worse_rounds >= self.bad_rounds:
                s.active, s.better_rounds = False, 0
                self.moves.append((now, i, False))
            elif not s.active and s.better_rounds >= self.good_rounds:
                s.active, s.worse_rounds = True, 0
                self.moves.append((now, i, True))
        if not any(s.active and s.alive for s in self.stats):  # never move off every path
            keep = min(self.alive, key=lambda i: self.stats[i].srtt or math.inf)
            self.stats[keep].active = True
            self.moves.append((now, keep, True))


def _lower_median(values: list[float]) -> float:
    """The lower median: the best of two, the second best of three or four."""
    return sorted(values)[(len(values) - 1) // 2]
