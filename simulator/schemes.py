"""The four reliability schemes the models know, and their parameters.

``sr-rto`` and ``sr-nack`` are Selective Repeat with an RTO of ``rto_rtts`` RTTs (default
``1 + alpha`` = 3, the paper's "SR RTO"). What a loss costs in the models is
:meth:`SchemeSpec.retry_rtts`: the RTO for sr-rto, one RTT for sr-nack (the NACK's round
trip; its RTO is only the backstop for a lost tail, and a 1-RTT RTO passed back into the
SDK would fire before every ACK). ``ec-mds`` and ``ec-xor`` are erasure coding with ``k`` data and
``m`` parity chunks per submessage (default 32, 8); their SR fallback uses ``rto_rtts``
(default ``1 + alpha``).

``fallback`` says what the EC models resend when a submessage cannot be decoded:
``"protocol"`` (default) the missing data chunks of the failed submessages, as the SDK
does; ``"paper"`` all ``k`` data chunks of each failed submessage, the paper's formula (the
paper figures use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sdr.errors import ConfigError
from sdr.simulator.ec_model import Code, Fallback, check_fallback
from sdr.simulator.link import Link

__all__ = ["SCHEMES", "SR_SCHEMES", "EC_SCHEMES", "SchemeSpec", "parse_ec"]

SR_SCHEMES = ("sr-rto", "sr-nack")
EC_SCHEMES = ("ec-mds", "ec-xor")
SCHEMES = SR_SCHEMES + EC_SCHEMES


def parse_ec(text: str) -> tuple[int, int]:
    """Parse ``"K,M"`` (e.g. ``"32,8"``) into ``(k, m)``."""
    try:
        k_text, m_text = text.split(",")
        k, m = int(k_text), int(m_text)
    except ValueError:
        raise ConfigError(
            f"EC parameters must look like 'K,M' (e.g. '32,8'), got {text!r}"
        ) from None
    if k < 1 or m < 1:
        raise ConfigError(f"EC needs k >= 1 and m >= 1, got {text!r}")
    return k, m


@dataclass(frozen=True)
class SchemeSpec:
    """A scheme name with its parameters; ``None`` means "the scheme's default".

    ``fallback`` (EC only): ``"protocol"`` or ``"paper"``, see the module docstring.
    """

    name: str
    rto_rtts: float | None = None
    k: int = 32
    m: int = 8
    fallback: Fallback = "protocol"

    def __post_init__(self) -> None:
        if self.name not in SCHEMES:
            raise ConfigError(f"unknown scheme {self.name!r}: expected one of {', '.join(SCHEMES)}")
        if self.rto_rtts is not None and not self.rto_rtts > 0:
            raise ConfigError(f"RTO must be > 0 RTTs, got {self.rto_rtts!r}")
        if self.k < 1 or self.m < 1:
            raise ConfigError(f"EC needs k >= 1 and m >= 1, got k={self.k}, m={self.m}")
        check_fallback(self.fallback)

    @property
    def is_ec(self) -> bool:
        """True for the erasure-coding schemes."""
        return self.name in EC_SCHEMES

    @property
    def code(self) -> Code:
        """``"mds"`` or ``"xor"`` for EC schemes."""
        if not self.is_ec:
            raise ConfigError(f"scheme {self.name!r} has no erasure code")
        return "mds" if self.name == "ec-mds" else "xor"

    def resolved_rto_rtts(self, link: Link) -> float:
        """The RTO in RTTs this scheme uses on ``link`` (the SDK's ``1 + alpha``)."""
        if self.rto_rtts is not None:
            return float(self.rto_rtts)
        return link.default_rto_rtts

    def retry_rtts(self, link: Link) -> float:
        """What one loss of a chunk delays it by, in RTTs: the NACK's round trip (1) for
        sr-nack, the RTO for the others."""
        return 1.0 if self.name == "sr-nack" else self.resolved_rto_rtts(link)

    def params(self, link: Link) -> dict[str, Any]:
        """The parameters that define this scheme on ``link`` (for reports and configs):
        ``rto_rtts`` is the SDK's RTO (alpha = rto_rtts - 1), ``retry_rtts`` (sr-nack) the
        models' repair delay."""
        out: dict[str, Any] = {"rto_rtts": self.resolved_rto_rtts(link)}
        if self.name == "sr-nack":
            out["retry_rtts"] = self.retry_rtts(link)
        if self.is_ec:
            out.update(k=self.k, m=self.m)
        out["chunk_size"] = link.chunk_size
        return out
