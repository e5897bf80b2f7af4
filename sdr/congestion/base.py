"""The congestion-controller interface: fed ACK, loss and send events with ``now``.

A controller is a sans-I/O state machine beside the reliability schemes (as aioquic keeps
congestion control beside loss recovery). It reads no clock and sends nothing: a driver
(or the simulator) reports what happened and reads two outputs:

- :attr:`CongestionController.pacing_rate`: bits/s the sender may pace at now;
- :attr:`CongestionController.cwnd`: bytes that may be in flight (sent, neither
  acknowledged nor declared lost); ``math.inf`` for a rate-only controller.

A driver paces at :attr:`~CongestionController.bounded_pacing_rate`: the controller's rate
held inside ``[min_rate, max_rate]``. A controller's own arithmetic (a sample of 0 after
an outage, a forged acknowledgement, a subclass's NaN) thus never stops the sender and
never surfaces as a configuration error of the pacer; the floor is what a sender still
sends at to learn that the path is back.

Events, all with ``now`` in seconds:

- :meth:`~CongestionController.on_sent` ``(now, nbytes)``: bytes left (data or repair);
- :meth:`~CongestionController.on_ack` ``(now, acked_bytes, rtt_s)``: bytes newly
  acknowledged, with an RTT sample in seconds when the ACK echoed the send time of what
  it acknowledges (None when it did not);
- :meth:`~CongestionController.on_loss` ``(now, lost_bytes, random_hint, sent_at)``: bytes
  declared lost; ``random_hint`` True when the caller knows the loss is not congestion
  (e.g. a loss report says it was isolated on a lossy path), False when it knows it is
  (tail drop reported by the network), None when it does not know (the usual case: the
  controller decides from its delay signal); ``sent_at`` when the lost bytes were sent,
  if known, so that losses of data sent before the controller's last reduction do not cut
  again (TCP's recovery point, RFC 6582).

Where the events come from in the SDK (docs/congestion.md, "In the SDK"): ``on_sent``
from the send table's departures; ``on_ack`` from the schemes' ``Delivered`` actions
(Selective Repeat: the chunks a SACK newly covers, with a Karn RTT sample); ``on_loss``
from their ``Lost`` actions (chunks queued again by a NACK or an RTO).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from sdr.congestion.estimators import AckRate
from sdr.errors import ConfigError

__all__ = ["CongestionController", "check_rate"]

_MIN_RATE = 1e3  # bits/s, as the reliability config's floor


def check_rate(name: str, value: object) -> float:
    """``value`` as bits/s if it is a finite number >= 1 kbit/s, else a one-line ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite rate in bits/s like 1e9, got {value!r}")
    if value < _MIN_RATE:
        raise ConfigError(f"{name} must be >= 1 kbit/s, got {value!r}; e.g. 1e9 (1 Gbit/s)")
    return float(value)


class CongestionController(ABC):
    """Base of every controller: keeps bytes in flight, RTT and ACK-rate estimates.

    rate: the configured rate in bits/s (today's ``rate_limit`` / ``link_rate``): where
        a controller starts, and what ``fixed`` paces at.
    max_rate: the ceiling in bits/s (the NIC's line rate); default ``rate``: a controller
        never sends faster than the user allowed.
    mtu: packet payload in bytes (a controller's smallest window is a few packets).
    min_rate: the floor in bits/s (default ``max_rate / 1000``, at least 1 kbit/s, at
        most ``rate``): a controller never paces below it.

    Subclasses override the ``on_*`` hooks, call ``super()`` first, and implement
    :attr:`pacing_rate` and :attr:`cwnd`.
    """

    name: ClassVar[str] = ""

    def __init__(
        self,
        rate: float,
        *,
        max_rate: float | None = None,
        mtu: int = 4096,
        min_rate: float | None = None,
    ) -> None:
        self.rate = check_rate("rate", rate)
        self.max_rate = self.rate if max_rate is None else check_rate("max_rate", max_rate)
        if self.max_rate < self.rate:
            raise ConfigError(f"max_rate {max_rate!r} must be >= rate {rate!r}")
        if min_rate is None:
            self.min_rate = min(self.rate, max(_MIN_RATE, self.max_rate / 1000))
        else:
            self.min_rate = check_rate("min_rate", min_rate)
            if self.min_rate > self.rate:
                raise ConfigError(f"min_rate {min_rate!r} must be <= rate {rate!r}")
        if isinstance(mtu, bool) or not isinstance(mtu, int) or not 64 <= mtu <= 1 << 20:
            raise ConfigError(f"mtu must be an integer number of bytes in [64, 1 MiB], got {mtu!r}")
        self.mtu = mtu
        self.in_flight = 0.0
        """Bytes sent and neither acknowledged nor declared lost."""
        self.min_rtt = math.inf
        """Smallest RTT sample seen (seconds): the propagation delay estimate."""
        self.srtt: float | None = None
        """Smoothed RTT (EWMA, gain 1/8), seconds; None before the first sample."""
        self.latest_rtt: float | None = None
        self.delivered = 0.0
        """Bytes acknowledged so far."""
        self.lost = 0.0
        """Bytes declared lost so far."""
        self.ack_rate = AckRate()
        """Rate (bits/s) at which ACKs covered bytes over about the last RTT."""

    # --- events -----------------------------------------------------------------------
    def on_sent(self, now: float, nbytes: float) -> None:
        """``nbytes`` left the sender at ``now`` (first transmissions and repairs alike)."""
        self.in_flight += nbytes

    def on_ack(self, now: float, acked_bytes: float, rtt_s: float | None = None) -> None:
        """``acked_bytes`` newly acknowledged at ``now``; ``rtt_s`` an RTT sample or None."""
        self.in_flight = max(0.0, self.in_flight - acked_bytes)
        self.delivered += acked_bytes
        if rtt_s is not None and rtt_s > 0:
            self.latest_rtt = rtt_s
            self.min_rtt = min(self.min_rtt, rtt_s)
            self.srtt = rtt_s if self.srtt is None else 0.875 * self.srtt + 0.125 * rtt_s
        self.ack_rate.window = self.srtt if self.srtt is not None else 0.0
        self.ack_rate.on_ack(now, self.delivered)

    def on_loss(
        self,
        now: float,
        lost_bytes: float,
        random_hint: bool | None = None,
        sent_at: float | None = None,
    ) -> None:
        """``lost_bytes`` declared lost at ``now`` (the module docstring says what the hint
        and ``sent_at``, the time they were sent, are for)."""
        self.in_flight = max(0.0, self.in_flight - lost_bytes)
        self.lost += lost_bytes

    # --- outputs ----------------------------------------------------------------------
    @property
    @abstractmethod
    def pacing_rate(self) -> float:
        """Bits/s the sender may pace at now."""

    @property
    @abstractmethod
    def cwnd(self) -> float:
        """Bytes allowed in flight now (``math.inf``: no window, pacing only)."""

    @property
    def bounded_pacing_rate(self) -> float:
        """What a driver paces at: :attr:`pacing_rate` held inside ``[min_rate, max_rate]``
        (bits/s; a NaN or a rate <= 0 from a controller's arithmetic paces at the floor)."""
        rate = self.pacing_rate
        if not rate > self.min_rate:  # below the floor, or NaN
            return self.min_rate
        return min(rate, self.max_rate)

    def can_send(self, nbytes: float) -> bool:
        """Whether ``nbytes`` more may go now under :attr:`cwnd` (one packet always may
        when nothing is in flight, so a tiny window cannot deadlock)."""
        return self.in_flight <= 0 or self.in_flight + nbytes <= self.cwnd

    def state(self) -> dict[str, Any]:
        """A snapshot for logs and benchmarks (units: bits/s, bytes, seconds)."""
        return {
            "controller": self.name,
            "pacing_rate": self.pacing_rate,
            "min_rate": self.min_rate,
            "cwnd": self.cwnd,
            "in_flight": self.in_flight,
            "min_rtt": self.min_rtt,
            "srtt": self.srtt,
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.pacing_rate / 1e9:.3f} Gbit/s>"
