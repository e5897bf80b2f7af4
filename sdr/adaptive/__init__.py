"""Adaptive reliability: estimate the link online, re-select the scheme, switch between messages.

    policy = AdaptivePolicy(selector=analytic_selector(...))   # selector from sdr.simulator/
    rqp = ReliableQP(qp, config, adaptive=policy)              # both ends (same candidates)

See docs/adaptive.md.
"""

from sdr.adaptive.estimator import LinkEstimate, LinkEstimator
from sdr.adaptive.planned import PlannedPolicy
from sdr.adaptive.policy import DEFAULT_CANDIDATES, AdaptivePolicy, Candidate, Selector, Switch
from sdr.adaptive.report import GapCounter, LossReport

__all__ = [
    "DEFAULT_CANDIDATES",
    "AdaptivePolicy",
    "Candidate",
    "GapCounter",
    "LinkEstimate",
    "LinkEstimator",
    "LossReport",
    "PlannedPolicy",
    "Selector",
    "Switch",
]
