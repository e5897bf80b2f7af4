"""Smoothed RTT and the retransmission timeout it implies (RFC 6298, section 2).

SRTT and RTTVAR follow the measured RTT samples (Karn: only chunks sent once give one);
the RTO is SRTT + 4 RTTVAR, never below the configured RTO (the user knows the link:
rtt + alpha * rtt) and never above ``max_rto``. Its samples keep the receiver's ACK delay
(an acknowledgement comes that much later, so the timer must cover it); the congestion
controller gets them without it. Sans-I/O: fed samples, it reads no
clock.
"""

from __future__ import annotations

__all__ = ["RttEstimator"]

_ALPHA = 1 / 8  # RFC 6298's gains
_BETA = 1 / 4
_K = 4


class RttEstimator:
    """SRTT/RTTVAR of one connection, with the RTO they imply."""

    def __init__(self, floor: float, max_rto: float) -> None:
        self.floor = floor
        self.max_rto = max(max_rto, floor)
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.min_rtt = float("inf")
        """The smallest sample so far."""
        self._rto = floor  # kept by sample(): the RTO is asked several times a round
        self.samples = 0
        """Samples taken so far (a new one tells every write the path answered)."""

    def sample(self, rtt: float) -> None:
        """One RTT measurement in seconds (ignored unless positive and finite)."""
        if not 0 < rtt < float("inf"):
            return
        self.samples += 1
        self.min_rtt = min(self.min_rtt, rtt)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = (1 - _BETA) * self.rttvar + _BETA * abs(self.srtt - rtt)
            self.srtt = (1 - _ALPHA) * self.srtt + _ALPHA * rtt
        self._rto = min(max(self.srtt + _K * self.rttvar, self.floor), self.max_rto)

    @property
    def rto(self) -> float:
        """SRTT + 4 RTTVAR, within [floor, max_rto] (the floor before any sample)."""
        return self._rto
