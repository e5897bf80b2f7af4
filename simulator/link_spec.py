"""The description of one direction of a long-haul link (:class:`LinkSpec`).

Its state machine is :class:`sdr.simulator.link_model.LinkDirection`. The discrete-event
simulator takes one per direction (:class:`sdr.simulator.des_transport.DesFabric`), the
WAN emulator applies them to real packets. Its names are the link's everywhere: ``rate``,
``rtt``, ``one_way_delay``, ``queue`` (the model's :class:`~sdr.simulator.link.Link` says
the same).
"""

from __future__ import annotations

from typing import Any

import attrs

from sdr.errors import ConfigError
from sdr.simulator.link import DEFAULT_RATE, DEFAULT_RTT, Link
from sdr.simulator.loss import Bernoulli, LossModel
from sdr.units import parse_rate, parse_size, parse_time

__all__ = ["LinkSpec"]

_MIN_QUEUE_BYTES = 64 << 10


def _probability(name: str, value: float) -> float:
    if isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def _model(name: str, value: LossModel | float | None) -> LossModel | None:
    if value is None or isinstance(value, LossModel):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Bernoulli(float(value))
    raise ConfigError(f"{name} must be a loss model or a probability, got {value!r}")


# attrs converters: the constructor takes numbers or units strings, the attributes hold
# numbers (one type per field)
def _rate(value: float | str) -> float:
    rate = parse_rate(value)
    if not rate > 0:
        raise ConfigError(f"link rate must be > 0 bit/s, got {value!r}")
    return rate


def _rtt(value: float | str) -> float:
    rtt = parse_time(value)
    if rtt < 0:
        raise ConfigError(f"RTT must be >= 0 s, got {value!r}")
    return rtt


_ONE_BDP = -1
"""What ``queue=None`` holds until the rate and RTT give its size."""


def _queue(value: float | str | None) -> int:
    if value is None:
        return _ONE_BDP
    queue = parse_size(value) if isinstance(value, str) else value
    if isinstance(queue, bool) or not isinstance(queue, int | float) or not queue > 0:
        raise ConfigError(f"link queue must be > 0 bytes, got {value!r}")
    return int(queue)


def _loss(value: LossModel | float | None) -> LossModel | None:
    return _model("loss", value)


def _control_loss(value: LossModel | float | None) -> LossModel | None:
    return _model("control_loss", value)


def _delay(value: float | str) -> float:
    delay = parse_time(value)
    if delay < 0:
        raise ConfigError(f"reorder delay and jitter must be >= 0 s, got {value!r}")
    return delay


def _blackouts(value: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    spans = tuple((float(lo), float(hi)) for lo, hi in value)
    if any(not 0 <= lo <= hi for lo, hi in spans):
        raise ConfigError(f"blackouts must be (start, end) with 0 <= start <= end: {spans}")
    return spans


@attrs.frozen
class LinkSpec:
    """One direction of a long-haul link. Sizes, rates and times accept units.

    Attributes:
        rate: link rate (bits/s).
        rtt: round-trip time; half of it is each direction's propagation delay.
        queue: drop-tail buffer in bytes (default: one bandwidth-delay product, >= 64 KiB).
        loss: loss model of data packets, or a per-packet probability (None: lossless).
        control_loss: loss model of control messages (None: lossless), for callers that
            tell data and control apart (the simulator).
        reorder: probability that a packet is held back, so later ones overtake it.
        reorder_delay: a held packet arrives this much later ...
        reorder_jitter: ... plus a uniform extra in ``[0, reorder_jitter]``.
        duplicate: probability that a delivered packet arrives twice (one packet time apart).
        corrupt: probability that one bit of a delivered packet is flipped.
        blackouts: (start, end) times in seconds, relative to the first packet, during
            which every packet is lost.
        seed: seeds every random draw of the direction.
    """

    # defaults of the attribute's type (the converter passes them through): attrs types a
    # field's value as its default's type
    rate: float = attrs.field(default=DEFAULT_RATE, converter=_rate)  # 1 Gbit/s
    rtt: float = attrs.field(default=DEFAULT_RTT, converter=_rtt)  # 25 ms
    queue: int = attrs.field(default=None, converter=_queue)
    loss: LossModel | None = attrs.field(factory=lambda: Bernoulli(0.0), converter=_loss)
    control_loss: LossModel | None = attrs.field(default=None, converter=_control_loss)
    reorder: float = 0.0
    reorder_delay: float = attrs.field(default=0.001, converter=_delay)  # 1 ms
    reorder_jitter: float = attrs.field(default=0.0, converter=_delay)
    duplicate: float = 0.0
    corrupt: float = 0.0
    blackouts: tuple[tuple[float, float], ...] = attrs.field(default=(), converter=_blackouts)
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if self.queue == _ONE_BDP:
            bdp = int(max(self.rate * self.rtt / 8, _MIN_QUEUE_BYTES))
            object.__setattr__(self, "queue", bdp)
        for name in ("reorder", "duplicate", "corrupt"):
            _probability(name, getattr(self, name))
        if self.reorder > 0 and self.reorder_delay == 0 and self.reorder_jitter == 0:
            raise ConfigError("reorder > 0 needs a reorder delay or jitter > 0 (how far)")

    @classmethod
    def from_link(cls, link: Link, *, queue: float | None = None, **kwargs: Any) -> LinkSpec:
        """One direction of the model's :class:`~sdr.simulator.link.Link` (its rate and
        RTT; the queue defaults to its switch buffering, ``link.queue``: ``alpha`` RTTs of
        line rate)."""
        return cls(
            rate=link.rate, rtt=link.rtt, queue=link.queue if queue is None else queue, **kwargs
        )

    @property
    def one_way_delay(self) -> float:
        """Propagation delay of the direction, ``rtt / 2`` seconds."""
        return self.rtt / 2
