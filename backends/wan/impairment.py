"""What the emulated long-haul link does to each packet, fed an explicit ``now``.

One :class:`LinkDirection` per direction: serialization at the link rate behind a bounded
drop-tail queue, random loss from a :mod:`sdr.simulator.loss` model, propagation delay,
reordering (extra delay for some packets), duplication, corruption and blackouts. It reads
no clock and does no I/O, so it is tested deterministically and shared by the TUN bridge
and the UDP relay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sdr.errors import ConfigError
from sdr.simulator.loss import Bernoulli, LossModel
from sdr.units import parse_rate, parse_size, parse_time

__all__ = ["LinkSpec", "LinkDirection", "Verdict"]


@dataclass(frozen=True)
class LinkSpec:
    """One direction of an emulated link. Sizes, rates and times accept units.

    rate: link rate (bits/s); rtt: round-trip time, half of it applied per direction;
    queue: drop-tail buffer in bytes (default: one bandwidth-delay product);
    loss: a loss model or a per-packet probability; reorder: probability a packet is held
    ``reorder_delay`` longer; duplicate / corrupt: per-packet probabilities;
    blackouts: (start, end) times in seconds, relative to the first packet, when every
    packet is lost.
    """

    rate: float | str = "1Gbit/s"
    rtt: float | str = "25ms"
    queue: int | str | None = None
    loss: LossModel | float = 0.0
    reorder: float = 0.0
    reorder_delay: float | str = "1ms"
    duplicate: float = 0.0
    corrupt: float = 0.0
    blackouts: tuple[tuple[float, float], ...] = field(default_factory=tuple)
    seed: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "rate", parse_rate(self.rate))
        set_(self, "rtt", parse_time(self.rtt))
        set_(self, "reorder_delay", parse_time(self.reorder_delay))
        if self.rate <= 0:
            raise ConfigError(f"link rate must be > 0, got {self.rate!r}")
        queue = self.queue if self.queue is not None else max(self.rate * self.rtt / 8, 64 << 10)
        set_(
            self,
            "queue",
            parse_size(int(queue)) if not isinstance(queue, str) else parse_size(queue),
        )
        if not isinstance(self.loss, LossModel):
            set_(self, "loss", Bernoulli(float(self.loss)))
        for name in ("reorder", "duplicate", "corrupt"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be a probability in [0, 1], got {value!r}")

    @property
    def one_way_delay(self) -> float:
        return self.rtt / 2


@dataclass(frozen=True, slots=True)
class Verdict:
    """What happens to one packet: delivered at these times (empty: lost)."""

    deliver_at: tuple[float, ...]
    corrupt: bool = False
    reason: str = ""


_QUEUE_FULL = Verdict((), reason="queue")
_BLACKOUT = Verdict((), reason="blackout")
_LOST = Verdict((), reason="loss")


class LinkDirection:
    """State of one direction: when the wire is free, and the random draws."""

    def __init__(self, spec: LinkSpec) -> None:
        self.spec = spec
        self._rng = np.random.default_rng(spec.seed)
        self._free_at = 0.0
        self._start: float | None = None
        self.stats = {
            "packets": 0,
            "bytes": 0,
            "delivered": 0,
            "queue_drops": 0,
            "loss_drops": 0,
            "blackout_drops": 0,
            "duplicated": 0,
            "reordered": 0,
            "corrupted": 0,
        }

    def queued_bytes(self, now: float) -> float:
        """Bytes waiting for the wire at ``now``."""
        return max(0.0, self._free_at - now) * self.spec.rate / 8

    def admit(self, now: float, size: int) -> Verdict:
        """A packet of ``size`` bytes (IP length) enters the link at ``now``."""
        spec, rng, stats = self.spec, self._rng, self.stats
        stats["packets"] += 1
        stats["bytes"] += size
        if self._start is None:
            self._start = now
        if self.queued_bytes(now) + size > spec.queue + 1e-6:  # tolerate float rounding
            stats["queue_drops"] += 1
            return _QUEUE_FULL
        self._free_at = max(now, self._free_at) + size * 8 / spec.rate
        if spec.blackouts:
            elapsed = now - self._start
            if any(lo <= elapsed < hi for lo, hi in spec.blackouts):
                stats["blackout_drops"] += 1
                return _BLACKOUT
        if spec.loss.drop(rng, size):
            stats["loss_drops"] += 1
            return _LOST
        arrive = self._free_at + spec.one_way_delay
        if spec.reorder and rng.random() < spec.reorder:
            stats["reordered"] += 1
            arrive += spec.reorder_delay
        times = (arrive,)
        if spec.duplicate and rng.random() < spec.duplicate:
            stats["duplicated"] += 1
            times = (arrive, arrive + size * 8 / spec.rate)
        corrupt = bool(spec.corrupt and rng.random() < spec.corrupt)
        stats["corrupted"] += corrupt
        stats["delivered"] += len(times)
        return Verdict(times, corrupt)

    def corrupt_bytes(self, packet: bytearray, skip: int = 0) -> None:
        """Flip one random bit past the first ``skip`` bytes (keep IP headers routable)."""
        if len(packet) > skip:
            pos = int(self._rng.integers(skip, len(packet)))
            packet[pos] ^= 1 << int(self._rng.integers(0, 8))
