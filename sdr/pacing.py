"""Sender pacing: a token bucket fed an explicit ``now`` (the paper's rate_limit attribute).

Drivers ask how many packets they may send now and report what they sent; the bucket
never lets the long-run rate exceed ``rate`` bits/s and allows a burst of ``burst_bits``.
"""

from __future__ import annotations

from sdr.errors import ConfigError

__all__ = ["TokenBucket", "UNPACED_BUDGET"]

UNPACED_BUDGET = 1 << 16
"""Packets per progress round when no rate limit is set."""


class TokenBucket:
    """Token bucket in bits; ``rate`` None means unpaced."""

    def __init__(self, rate: float | None, burst_bits: float) -> None:
        if rate is not None and rate <= 0:
            raise ConfigError(f"rate must be > 0 bits/s or None, got {rate!r}")
        if burst_bits <= 0:
            raise ConfigError(f"burst must be > 0 bits, got {burst_bits!r}")
        self.rate = rate
        self.burst_bits = burst_bits
        self._tokens = burst_bits
        self._last: float | None = None

    def _refill(self, now: float) -> None:
        if self._last is not None and self.rate is not None and now > self._last:
            self._tokens = min(self.burst_bits, self._tokens + (now - self._last) * self.rate)
        if self._last is None or now > self._last:
            self._last = now

    def set_rate(self, now: float, rate: float | None) -> None:
        """Pace at ``rate`` bits/s from ``now`` on (tokens earned so far are kept)."""
        if rate is not None and rate <= 0:
            raise ConfigError(f"rate must be > 0 bits/s or None, got {rate!r}")
        if self.rate is not None:
            self._refill(now)
        self.rate = rate
        if self._last is None or now > self._last:
            self._last = now

    def budget(self, now: float, packet_bits: float) -> int:
        """Whole packets of ``packet_bits`` that may be sent at ``now``."""
        if self.rate is None:
            return UNPACED_BUDGET
        self._refill(now)
        return max(0, int(self._tokens // packet_bits))

    def consume(self, now: float, bits: float) -> None:
        """Account for ``bits`` sent at ``now`` (may go negative: a debt paid by waiting)."""
        if self.rate is None:
            return
        self._refill(now)
        self._tokens -= bits

    def next_send_time(self, now: float, packet_bits: float) -> float:
        """Earliest time one more packet of ``packet_bits`` may go."""
        if self.rate is None:
            return now
        self._refill(now)
        deficit = packet_bits - self._tokens
        return now if deficit <= 0 else now + deficit / self.rate
