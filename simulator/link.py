"""The link as the completion-time models see it: rate, RTT, MTU, chunk size, alpha.

One :class:`Link` describes a point-to-point path between two datacenters, both directions
alike, together with what the protocol does on it (packets of ``mtu`` bytes, chunks of
``chunk_size``, switch buffering ``alpha`` that sets the RTO). The analytic models, the
Monte Carlo samplers, the scheme selector and the sweeps take it. What one direction does
to single packets (queue, loss model, reordering, blackouts ...) is the packet-level link,
:class:`sdr.simulator.link_spec.LinkSpec`, which the discrete-event simulator and the WAN
emulator share; :meth:`LinkSpec.from_link` makes one from a :class:`Link`. Both name a
quantity alike: ``rate`` (bits/s), ``rtt`` and ``one_way_delay`` (s), ``queue`` (bytes).

Units are the SDK's internal ones: bytes, bits per second, seconds, metres.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from sdr.errors import ConfigError

__all__ = [
    "DEFAULT_RATE",
    "DEFAULT_RTT",
    "PAPER_PROPAGATION_SPEED",
    "FIBRE_PROPAGATION_SPEED",
    "DropUnit",
    "Link",
    "chunk_drop_probability",
]

#: The SDK's default line rate, bits/s: ``LinkSpec``'s, ``sdr send --rate``'s and every
#: simulator command's (``sdr sim --rate``, ``sdr sweep --rates``).
DEFAULT_RATE = 1e9
#: The default round-trip time, seconds: 3750 km at :data:`PAPER_PROPAGATION_SPEED`.
DEFAULT_RTT = 0.025
#: Propagation speed implied by the paper's figures (3750 km <-> 25 ms RTT): 3e8 m/s.
PAPER_PROPAGATION_SPEED = 3.0e8
#: Light in silica fibre, about 2/3 c (~5 us/km one way).
FIBRE_PROPAGATION_SPEED = 2.0e8

DropUnit = Literal["chunk", "packet"]


def chunk_drop_probability(p: float, unit: DropUnit, packets_per_chunk: int) -> float:
    """Probability that a chunk is lost, given a drop probability ``p`` per ``unit``.

    A chunk is lost when any of its ``packets_per_chunk`` packets is lost, so a per-packet
    rate becomes ``1 - (1 - p) ** N``; a per-chunk rate is returned unchanged.
    """
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"drop probability must be in [0, 1), got {p!r}")
    if unit == "chunk":
        return float(p)
    if unit == "packet":
        return float(-math.expm1(packets_per_chunk * math.log1p(-p)))
    raise ConfigError(f"drop unit must be 'chunk' or 'packet', got {unit!r}")


@dataclass(frozen=True)
class Link:
    """A long-haul link as the paper models it.

    Attributes:
        rate: line rate in bits per second (e.g. 400e9).
        rtt: round-trip time in seconds (propagation plus fixed delays).
        mtu: packet payload size in bytes; a chunk is a whole number of packets.
        chunk_size: bytes per chunk (one bitmap bit, the unit of retransmission and coding).
        alpha: switch buffering along the path in RTTs; the SR retransmission timeout is
            ``RTO = RTT + alpha * RTT`` and EC's fallback timer adds ``beta = alpha / 2`` RTTs.
    """

    rate: float
    rtt: float
    mtu: int = 4096
    chunk_size: int = 65536
    alpha: float = 2.0

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ConfigError(f"line rate must be > 0 bit/s, got {self.rate!r}")
        if not (self.rtt >= 0 and math.isfinite(self.rtt)):
            raise ConfigError(f"RTT must be >= 0 s, got {self.rtt!r}")
        if self.mtu <= 0:
            raise ConfigError(f"MTU must be > 0 bytes, got {self.mtu!r}")
        if self.chunk_size <= 0 or self.chunk_size % self.mtu:
            raise ConfigError(
                f"chunk size must be a positive multiple of the MTU ({self.mtu}), "
                f"got {self.chunk_size!r}"
            )
        if not (self.alpha >= 0 and math.isfinite(self.alpha)):
            raise ConfigError(f"alpha (switch buffering in RTTs) must be >= 0, got {self.alpha!r}")

    @classmethod
    def from_distance(
        cls,
        distance: float,
        rate: float,
        *,
        propagation_speed: float = PAPER_PROPAGATION_SPEED,
        extra_rtt: float = 0.0,
        **kwargs: float | int,
    ) -> Link:
        """A link whose RTT is the round trip over ``distance`` metres at the propagation
        speed (m/s), plus ``extra_rtt`` seconds.

        The default speed (3e8 m/s) reproduces the paper's 3750 km = 25 ms RTT; pass
        :data:`FIBRE_PROPAGATION_SPEED` for ~5 us/km one way in fibre.
        """
        if not (propagation_speed > 0):
            raise ConfigError(f"propagation speed must be > 0 m/s, got {propagation_speed!r}")
        if not (distance >= 0):
            raise ConfigError(f"distance must be >= 0 m, got {distance!r}")
        rtt = 2.0 * distance / propagation_speed + extra_rtt
        return cls(rate=rate, rtt=rtt, **kwargs)  # type: ignore[arg-type]

    def with_chunk(self, chunk_size: int) -> Link:
        """The same link with another chunk size."""
        return replace(self, chunk_size=chunk_size)

    @property
    def t_inj_s(self) -> float:
        """Injection time of one chunk: chunk bits / line rate (T_INJ)."""
        return self.chunk_size * 8.0 / self.rate

    @property
    def one_way_delay(self) -> float:
        """Propagation delay in one direction, ``rtt / 2`` (what a per-packet model delays by)."""
        return self.rtt / 2.0

    def serialization_s(self, nbytes: int) -> float:
        """Time to put ``nbytes`` on the wire at the line rate (per packet in a DES/emulator)."""
        return nbytes * 8.0 / self.rate

    @property
    def queue(self) -> float:
        """Switch buffering along the path, ``alpha`` RTTs of line rate, in bytes (the
        default ``queue`` of :meth:`LinkSpec.from_link`)."""
        return self.alpha * self.bdp_bytes

    @property
    def packets_per_chunk(self) -> int:
        """Packets (MTUs) per chunk, N in ``P_chunk = 1 - (1 - p)^N``."""
        return self.chunk_size // self.mtu

    @property
    def bdp_bytes(self) -> float:
        """Bandwidth-delay product in bytes."""
        return self.rate * self.rtt / 8.0

    @property
    def beta(self) -> float:
        """EC fallback slack in RTTs, ``beta = alpha / 2``."""
        return self.alpha / 2.0

    def num_chunks(self, size_bytes: int) -> int:
        """Chunks in a message of ``size_bytes`` (a partial last chunk counts as a whole one)."""
        if size_bytes <= 0:
            raise ConfigError(f"message size must be > 0 bytes, got {size_bytes!r}")
        return -(-int(size_bytes) // self.chunk_size)

    def rto_s(self, rto_rtts: float) -> float:
        """Retransmission timeout in seconds for a timeout of ``rto_rtts`` RTTs."""
        if not (rto_rtts > 0):
            raise ConfigError(f"RTO must be > 0 RTTs, got {rto_rtts!r}")
        return rto_rtts * self.rtt

    @property
    def default_rto_rtts(self) -> float:
        """The SR RTO in RTTs implied by alpha: ``1 + alpha`` (3 at the default alpha = 2)."""
        return 1.0 + self.alpha

    def ideal_time_s(self, size_bytes: int) -> float:
        """Completion time on a lossless link, ``M * T_INJ + RTT`` (the normalizer)."""
        return self.num_chunks(size_bytes) * self.t_inj_s + self.rtt

    def chunk_drop(self, p: float, unit: DropUnit = "chunk") -> float:
        """Chunk loss probability for this link's chunk size, see :func:`chunk_drop_probability`."""
        return chunk_drop_probability(p, unit, self.packets_per_chunk)
