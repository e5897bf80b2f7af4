"""Actions the core hands to a driver (the driver carries them out, the core never does I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from sdr.transport import Bind  # the record TransportQP.bind takes: the action itself

__all__ = ["Bind", "Unbind", "Seal", "Reopen", "SendControl", "Action"]


@dataclass(frozen=True, slots=True)
class Unbind:
    """Point key-table entry (generation, slot) at NULL: the late-packet guard."""

    generation: int
    slot: int


@dataclass(frozen=True, slots=True)
class Seal:
    """Refuse packets [start, stop) of the message at entry (generation, slot) from now on:
    their chunk is verified, so its bytes are final (the placement guard)."""

    generation: int
    slot: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class Reopen:
    """Accept packets [start, stop) at entry (generation, slot) once more: their chunk
    failed its check and awaits repair."""

    generation: int
    slot: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class SendControl:
    """Send one control message to the peer."""

    data: bytes


Action = Bind | Unbind | Seal | Reopen | SendControl
