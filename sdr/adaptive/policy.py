"""The adaptive policy: re-run a scheme selector on the live estimate, switch with hysteresis.

The core cannot import the simulator, so the selector is injected by the layer above
(:func:`sdr.simulator.adaptive_select.analytic_selector` scores candidates with the paper's
analytic models). A selector maps ``(estimate, message size, candidates)`` to a predicted
completion time per candidate. The policy:

* evaluates at most once per ``interval`` seconds, when a write is admitted, and only
  once ``min_trials`` chunks of loss evidence exist;
* switches only between messages (the next admitted write uses the new scheme);
* switches only when the best candidate is predicted at least ``gain`` (fraction) faster
  than the current one in ``patience`` consecutive evaluations (one noisy estimate never
  flips the scheme, and two candidates within ``gain`` never flap), or at once when it is
  predicted ``strong_gain`` faster (a large margin is not noise; waiting costs most when
  the link has just turned bad);
* logs every switch with its reason (INFO on ``sdr.adaptive.policy``) and keeps it in
  :attr:`AdaptivePolicy.switches`.

Both ends of a connection construct a policy with the same candidates; the receiver's
needs no selector (it learns each message's scheme from the DIGEST fingerprint).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdr.adaptive.estimator import LinkEstimate, LinkEstimator
from sdr.adaptive.report import LossReport, is_loss_report
from sdr.errors import ConfigError, ProtocolError

__all__ = ["Candidate", "Selector", "Switch", "AdaptivePolicy", "DEFAULT_CANDIDATES"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Candidate:
    """A scheme the policy may pick: a registered scheme name and, for EC, (k, m)."""

    scheme: str
    k: int = 0
    m: int = 0

    @property
    def is_ec(self) -> bool:
        return self.scheme.startswith("ec-")

    def label(self) -> str:
        """``sr-nack`` or ``ec-mds(32,8)``."""
        return f"{self.scheme}({self.k},{self.m})" if self.is_ec else self.scheme

    def changes(self) -> dict[str, Any]:
        """ReliabilityConfig fields that select this candidate."""
        out: dict[str, Any] = {"scheme": self.scheme}
        if self.is_ec:
            out.update(k=self.k, m=self.m)
        return out


DEFAULT_CANDIDATES: tuple[Candidate, ...] = (
    Candidate("sr-nack"),
    Candidate("sr-rto"),
    Candidate("ec-mds", 32, 8),
    Candidate("ec-mds", 32, 4),
    Candidate("ec-xor", 32, 8),
)
"""SR both ways, MDS at 25% and 12.5% parity, XOR at 25%."""

Selector = Callable[[LinkEstimate, int, Sequence[Candidate]], Mapping[Candidate, float]]
"""(estimate, message bytes, candidates) -> predicted completion seconds per candidate."""


@dataclass(frozen=True)
class Switch:
    """One scheme switch: when, from what to what, and why."""

    time: float
    old: Candidate
    new: Candidate
    predicted_old_s: float
    predicted_new_s: float
    estimate: LinkEstimate
    reason: str = field(default="")


class AdaptivePolicy:
    """Online scheme selection for one connection (pass to ``ReliableQP(adaptive=...)``)."""

    def __init__(
        self,
        selector: Selector | None = None,
        candidates: Sequence[Candidate] = DEFAULT_CANDIDATES,
        *,
        initial: Candidate | None = None,
        interval: float = 0.1,
        gain: float = 0.05,
        patience: int = 2,
        strong_gain: float | None = 0.15,
        min_trials: float = 64.0,
        estimator: LinkEstimator | None = None,
    ) -> None:
        cands = tuple(dict.fromkeys(candidates))
        if not cands:
            raise ConfigError("an adaptive policy needs at least one candidate scheme")
        if initial is not None and initial not in cands:
            raise ConfigError(f"initial {initial.label()} is not among the candidates")
        if interval < 0 or gain < 0 or patience < 1:
            raise ConfigError(
                f"need interval >= 0, gain >= 0, patience >= 1; got {interval}, {gain}, {patience}"
            )
        self.selector = selector
        self.candidates = cands
        self.current = initial or cands[0]
        self.interval = interval
        self.gain = gain
        self.patience = patience
        self.strong_gain = strong_gain
        self.min_trials = min_trials
        self.estimator = estimator or LinkEstimator()
        ceiling = self.estimator.half_life_chunks / math.log(2)  # steady-state decayed trials
        if min_trials >= ceiling:
            raise ConfigError(
                f"min_trials={min_trials} is never reached with a {self.estimator.half_life_chunks}"
                f"-chunk half-life (decayed trials stay below {ceiling:.0f}); lower it"
            )
        self.switches: list[Switch] = []
        self.evaluations = 0
        self.choices: dict[Candidate, int] = {}
        self._last_eval: float | None = None
        self._streak = 0
        self._streak_target: Candidate | None = None
        self.last_scores: dict[Candidate, float] = {}

    # --- fed by the reliable QP and the scheme proxies -------------------------------------
    def before_write(self, now: float, length: int) -> Candidate:
        """A write of ``length`` bytes is about to start: maybe re-evaluate; its scheme."""
        if self.selector is not None and self._due(now):
            self._evaluate(now, length)
        self.choices[self.current] = self.choices.get(self.current, 0) + 1
        return self.current

    def on_control(self, now: float, data: bytes) -> bool:
        """Take a control message if it is a LOSS_REPORT (True), else leave it (False)."""
        if not is_loss_report(data):
            return False
        try:
            report = LossReport.decode(data)
        except ProtocolError as exc:
            log.debug("dropped a malformed LOSS_REPORT: %s", exc)
            return True
        est = self.estimator
        est.observe_loss(now, report.trials, report.losses, report.runs)
        est.observe_delivery(now, report.nbytes, report.span_ns / 1e9)
        return True

    def on_rtt(self, now: float, sample: float) -> None:
        """An RTT sample from a sender machine (ACK arrival - last data departure)."""
        self.estimator.observe_rtt(now, sample)

    # --- evaluation -------------------------------------------------------------------------
    def _due(self, now: float) -> bool:
        if self.estimator.estimate().trials < self.min_trials:
            return False
        return self._last_eval is None or now - self._last_eval >= self.interval

    def _evaluate(self, now: float, length: int) -> None:
        assert self.selector is not None
        self._last_eval = now
        self.evaluations += 1
        est = self.estimator.estimate()
        scores = dict(self.selector(est, length, self.candidates))
        self.last_scores = scores
        if self.current not in scores or not scores:
            raise ConfigError(f"the selector scored no value for {self.current.label()}")
        best = min(scores, key=lambda c: (scores[c], c != self.current))
        old_s, new_s = scores[self.current], scores[best]
        if best == self.current or new_s * (1.0 + self.gain) > old_s:
            self._streak, self._streak_target = 0, None
            return
        if best != self._streak_target:
            self._streak, self._streak_target = 0, best
        self._streak += 1
        strong = self.strong_gain is not None and new_s * (1.0 + self.strong_gain) <= old_s
        if self._streak < self.patience and not strong:
            return
        reason = (
            f"predicted {new_s * 1e3:.1f} ms vs {old_s * 1e3:.1f} ms for {length} B "
            f"({(1 - new_s / old_s) * 100:.0f}% faster) in {self._streak} consecutive "
            f"evaluation(s) at {est.describe()}"
        )
        switch = Switch(now, self.current, best, old_s, new_s, est, reason)
        self.switches.append(switch)
        log.info("switch %s -> %s: %s", self.current.label(), best.label(), reason)
        self.current = best
        self._streak, self._streak_target = 0, None
