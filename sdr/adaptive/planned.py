"""A scheme per message fixed in advance: the n-th write admitted uses ``plan(n)``.

For a caller that knows more than a live estimate can. A file transfer knows which of
its messages is the last one, where a loss costs the most (its repair cannot overlap
later data), and protects only that one with erasure coding (``sdr.cli.transfer_tail``).
Writes are admitted in the order they were posted, so the n-th admitted is the n-th
posted. The receiving end needs only an :class:`~sdr.adaptive.AdaptivePolicy` with the
same candidates: it learns each message's scheme from its DIGEST.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sdr.adaptive.policy import AdaptivePolicy, Candidate
from sdr.errors import ConfigError

__all__ = ["PlannedPolicy"]


class PlannedPolicy(AdaptivePolicy):
    """Every write's scheme from ``plan(index)`` (0 for the first write), never re-judged."""

    def __init__(self, candidates: Sequence[Candidate], plan: Callable[[int], Candidate]) -> None:
        super().__init__(None, candidates)
        self._plan = plan
        self.writes = 0
        """Writes admitted so far."""

    def before_write(self, now: float, length: int) -> Candidate:
        choice = self._plan(self.writes)
        if choice not in self.candidates:
            raise ConfigError(
                f"the plan picked {choice.label()} for write {self.writes}, which is none of "
                f"the candidates {[c.label() for c in self.candidates]}"
            )
        self.writes += 1
        self.current = choice
        self.choices[choice] = self.choices.get(choice, 0) + 1
        return choice
