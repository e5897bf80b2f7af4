"""Validated attributes of a queue pair (the paper's qp_create attributes).

Sizes, rates and times accept the units syntax of :mod:`sdr.units` (``"64KiB"``,
``"100Gbit/s"``); the stored values are bytes and bits per second.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from sdr.errors import ConfigError
from sdr.immediate import ImmediateLayout
from sdr.units import format_size, parse_rate, parse_size

__all__ = ["QPAttr"]

MIN_MTU = 64
MAX_MTU = 1 << 20
MAX_CHANNELS = 256
MAX_GENERATIONS = 16


def _int_in(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be in [{low}, {high}], got {value}")
    return value


# attrs converters: the constructor takes a number or a units string, the attribute holds
# the number (one type per field; a type checker sees both sides)
def _mtu(value: int | str) -> int:
    return _int_in("mtu", parse_size(value, field="mtu"), MIN_MTU, MAX_MTU)


def _chunk_size(value: int | str) -> int:
    return parse_size(value, field="chunk_size")


def _max_message_size(value: int | str) -> int:
    return parse_size(value, field="max_message_size")


def _rate_limit(value: float | str | None) -> float | None:
    if value is None:
        return None
    rate = parse_rate(value, field="rate_limit")
    if rate <= 0:
        raise ConfigError(f"rate_limit must be > 0 or None, got {value!r}; e.g. '10Gbit/s'")
    return rate


@attrs.frozen(slots=False)  # slots=False: the cached layout needs a __dict__
class QPAttr:
    """Attributes of an SDR queue pair.

    mtu: payload bytes per packet (one write-with-immediate each).
    chunk_size: bytes per bitmap bit; a multiple of the MTU (the paper's default 64 KiB).
    max_message_size: largest message; also the size of one slot of the remote key space.
    max_messages: receive slots, i.e. messages in flight per direction. Odd by default
        (127, not the paper's 128): an odd slot count is coprime with the 2^id_bits
        message ids, so a receive's (id, slot, generation) repeats only every
        127 x 1024 messages and a straggler cannot land in a later message
        (sdr.id_reuse, docs/reliability.md "Stragglers").
    channels: transport QPs per generation; packets go round-robin over them.
    generations: transport QP sets per SDR QP; stale-generation packets are dropped.
    rate_limit: sender pacing in bits/s, or None for unpaced.
    id_bits / offset_bits / user_imm_bits: the 32-bit immediate split (10+18+4 default).
    """

    mtu: int = attrs.field(default=4096, converter=_mtu)
    chunk_size: int = attrs.field(default=65536, converter=_chunk_size)
    max_message_size: int = attrs.field(default=8 << 20, converter=_max_message_size)
    max_messages: int = 127
    channels: int = 1
    generations: int = 4
    rate_limit: float | None = attrs.field(default=None, converter=_rate_limit)
    id_bits: int = 10
    offset_bits: int = 18
    user_imm_bits: int = 4

    def __attrs_post_init__(self) -> None:
        layout = self.layout  # validates the split
        mtu, chunk = self.mtu, self.chunk_size
        if chunk < mtu or chunk % mtu:
            raise ConfigError(
                f"chunk_size {format_size(chunk, exact=True)} must be a whole multiple of the mtu "
                f"({mtu} bytes), e.g. {format_size(mtu * 16, exact=True)!r}"
            )
        if self.max_message_size < 1:
            raise ConfigError(f"max_message_size must be >= 1 byte, got {self.max_message_size}")
        limit = layout.max_packets * mtu
        if self.max_message_size > limit:
            raise ConfigError(
                f"max_message_size {format_size(self.max_message_size, exact=True)} exceeds what "
                f"{layout.offset_bits} offset bits address at mtu {mtu}: "
                f"{format_size(limit, exact=True)}; "
                "raise offset_bits (e.g. 8+22+2) or the mtu"
            )
        _int_in("max_messages", self.max_messages, 1, layout.max_message_ids)
        _int_in("channels", self.channels, 1, MAX_CHANNELS)
        _int_in("generations", self.generations, 1, MAX_GENERATIONS)

    @functools.cached_property
    def layout(self) -> ImmediateLayout:
        """The immediate split these attributes describe."""
        return ImmediateLayout(self.id_bits, self.offset_bits, self.user_imm_bits)

    @property
    def packets_per_chunk(self) -> int:
        """Packets per bitmap chunk."""
        return self.chunk_size // self.mtu

    def replace(self, **changes: Any) -> QPAttr:
        """A copy with some attributes changed (validated again)."""
        return attrs.evolve(self, **changes)

    def wire_dict(self) -> dict[str, Any]:
        """The attributes both ends of a connection must agree on."""
        return {
            "mtu": self.mtu,
            "max_message_size": self.max_message_size,
            "max_messages": self.max_messages,
            "channels": self.channels,
            "generations": self.generations,
            "id_bits": self.id_bits,
            "offset_bits": self.offset_bits,
            "user_imm_bits": self.user_imm_bits,
        }

    def as_dict(self) -> dict[str, Any]:
        """All attributes as plain values (bytes, bits/s)."""
        return attrs.asdict(self)
