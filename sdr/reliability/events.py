"""What a :class:`~sdr.reliability.ReliableConnection` reports through ``next_event()``."""

from __future__ import annotations

from dataclasses import dataclass, field

from sdr.errors import SDRError

__all__ = ["Event", "WriteCompleted", "ReceiveCompleted", "MessageFailedEvent", "RtoAdvice"]


@dataclass(frozen=True)
class WriteCompleted:
    """Write ``seq`` is done: the receiver verified every byte and acknowledged it."""

    seq: int
    length: int
    stats: dict[str, int] = field(default_factory=dict)
    """The scheme's counters of this message (chunks sent, retransmitted, NACKs ...)."""


@dataclass(frozen=True)
class ReceiveCompleted:
    """Receive ``seq`` is done: every byte landed (or was decoded) and was verified."""

    seq: int
    length: int
    stats: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MessageFailedEvent:
    """A write or receive (``kind``) failed with ``error`` (MessageFailed, sdr.TimeoutError,
    ProtocolError); what arrived of a receive is in its buffer, but not verified."""

    kind: str
    seq: int
    length: int
    error: SDRError
    stats: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RtoAdvice:
    """The finished writes repaired too many chunks for nothing: the RTO is short for this
    path, or the ACKs came late; ``text`` says which and the fix (once per connection).
    The connection only reports it; :class:`sdr.runtime.ReliableQP` turns it into an
    :class:`~sdr.reliability.rto_check.RtoWarning`, another driver may log it."""

    text: str


Event = WriteCompleted | ReceiveCompleted | MessageFailedEvent | RtoAdvice
