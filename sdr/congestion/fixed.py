"""``fixed``: today's behaviour. Pace at the configured rate; every event is ignored."""

from __future__ import annotations

import math

from sdr.congestion.base import CongestionController

__all__ = ["FixedRate"]


class FixedRate(CongestionController):
    """Paces at ``rate`` bits/s whatever happens; no window.

    Right on a link SDR owns (a dedicated wavelength or a reserved circuit), where any
    controller can only lose time probing; wrong on a shared one (it starves or floods).
    """

    name = "fixed"

    @property
    def pacing_rate(self) -> float:
        return self.rate

    @property
    def cwnd(self) -> float:
        return math.inf
