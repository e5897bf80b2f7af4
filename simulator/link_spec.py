"""The description of one direction of a long-haul link (:class:`LinkSpec`).

Its state machine is :class:`sdr.simulator.link_model.LinkDirection`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdr.errors import ConfigError
from sdr.simulator.link import Link
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


@dataclass(frozen=True)
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

    rate: float | str = "1Gbit/s"
    rtt: float | str = "25ms"
    queue: float | str | None = None
    loss: LossModel | float | None = 0.0
    control_loss: LossModel | float | None = None
    reorder: float = 0.0
    reorder_delay: float | str = "1ms"
    reorder_jitter: float | str = 0.0
    duplicate: float = 0.0
    corrupt: float = 0.0
    blackouts: tuple[tuple[float, float], ...] = field(default_factory=tuple)
    seed: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "rate", parse_rate(self.rate))
        set_(self, "rtt", parse_time(self.rtt))
        set_(self, "reorder_delay", parse_time(self.reorder_delay))
        set_(self, "reorder_jitter", parse_time(self.reorder_jitter))
        if not self.rate > 0:
            raise ConfigError(f"link rate must be > 0 bit/s, got {self.rate!r}")
        if self.rtt < 0:
            raise ConfigError(f"RTT must be >= 0 s, got {self.rtt!r}")
        queue = self.queue
        if queue is None:
            queue = int(max(self.rate * self.rtt / 8, _MIN_QUEUE_BYTES))
        elif isinstance(queue, str):
            queue = parse_size(queue)
        if isinstance(queue, bool) or not queue > 0:
            raise ConfigError(f"link queue must be > 0 bytes, got {self.queue!r}")
        set_(self, "queue", queue)
        set_(self, "loss", _model("loss", self.loss))
        set_(self, "control_loss", _model("control_loss", self.control_loss))
        for name in ("reorder", "duplicate", "corrupt"):
            _probability(name, getattr(self, name))
        if self.reorder_delay < 0 or self.reorder_jitter < 0:
            raise ConfigError(
                f"reorder delay and jitter must be >= 0 s, got {self.reorder_delay!r} "
                f"and {self.reorder_jitter!r}"
            )
        if self.reorder > 0 and self.reorder_delay == 0 and self.reorder_jitter == 0:
            raise ConfigError("reorder > 0 needs a reorder delay or jitter > 0 (how far)")
        spans = tuple((float(lo), float(hi)) for lo, hi in self.blackouts)
        if any(not 0 <= lo <= hi for lo, hi in spans):
            raise ConfigError(f"blackouts must be (start, end) with 0 <= start <= end: {spans}")
        set_(self, "blackouts", spans)

    @classmethod
    def from_link(cls, link: Link, *, queue: float | None = None, **kwargs: object) -> LinkSpec:
        """One direction of the analytic :class:`~sdr.simulator.link.Link` (its rate and
        RTT; the queue defaults to its switch buffering, ``alpha`` RTTs of line rate)."""
        buffer = link.buffer_bytes if queue is None else queue
        return cls(rate=link.bandwidth_bps, rtt=link.rtt_s, queue=buffer, **kwargs)  # type: ignore[arg-type]

    @property
    def one_way_delay(self) -> float:
        """Propagation delay of the direction, ``rtt / 2`` seconds."""
        return self.rtt / 2  # type: ignore[operator]
