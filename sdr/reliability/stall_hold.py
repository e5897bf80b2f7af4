"""When the connection moves, every message's no-progress deadline moves on: at most once
per sixteenth of the stall timeout.

A chunk newly acknowledged or arrived, of any message, shows the connection is alive, so
no message that waits its turn may time out (``ReliabilityConfig.stall_timeout``). Each
such event pushed every machine's deadline to ``now + stall``: one call per machine per
round (20,000 calls for a 576 MiB receive). Pushing to ``now + stall * 17/16`` and then
skipping the pushes that would not move it past ``now + stall`` keeps every deadline at
least ``stall`` after the last progress, with one push per ``stall / 16``.
"""

from __future__ import annotations

import math

__all__ = ["StallHold"]

_SLACK = 1 / 16


class StallHold:
    """The last deadline given to every machine (sans-I/O: each call takes ``now``)."""

    def __init__(self) -> None:
        self._until = -math.inf

    def push(self, now: float, stall: float) -> float | None:
        """The deadline to hold every machine to now that the connection moved, or None
        when the last one still lies ``stall`` or more ahead."""
        if now + stall <= self._until:
            return None
        self._until = now + stall * (1 + _SLACK)
        return self._until
