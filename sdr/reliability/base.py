"""The interface every reliability scheme implements: sans-I/O sender and receiver machines.

A scheme is a pair of state machines per message, built by a :class:`Scheme`. They never
touch a socket, a clock or a QP: :class:`sdr.reliability.ReliableConnection` (itself
sans-I/O, over an SDR QP core) feeds them events with an explicit ``now`` and carries out
the actions they return, exactly like the SDR core one level down::

    machine.start(now)                      # sender only
    machine.on_sent(now, lane, chunks)      # sender: these chunks left (after pacing)
    machine.on_chunks(now, lane, chunks)    # receiver: these chunk bits became set
    machine.on_control(now, message)        # a control message for this message
    machine.do_work(now)                    # one step of CPU work (checksums, coding)
    machine.handle_timer(now)               # when now >= machine.next_timer()
    for action in machine.actions(): ...    # SendChunks, SendMessage, SealChunks,
                                            # ReopenChunks, Finished, Delivered, Lost

A sender's :class:`Delivered` and :class:`Lost` feed the connection's congestion
controller (:mod:`sdr.congestion`); a scheme that emits neither is paced by rate alone.

Lanes: each reliable message travels as one SDR stream per lane, matched by order. Lane 0
(DATA) is the user's buffer at its natural offsets; schemes may add lanes whose buffers
they own (EC: lane 1, PARITY). Both ends derive the same lane lengths from the message
length, so the n-th message is always SDR messages n*lanes .. n*lanes+lanes-1.
"""

from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sdr.errors import SDRError
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.geometry import MessageGeometry
from sdr.reliability.integrity import fingerprint
from sdr.reliability.messages import ControlMessage
from sdr.reliability.rtt_estimator import RttEstimator

__all__ = [
    "Lane",
    "SendChunks",
    "SendMessage",
    "SealChunks",
    "ReopenChunks",
    "Finished",
    "Delivered",
    "Lost",
    "SchemeAction",
    "Status",
    "Machine",
    "SchemeSender",
    "SchemeReceiver",
    "Scheme",
    "earliest",
]


class Lane(enum.IntEnum):
    """The SDR streams of one reliable message."""

    DATA = 0
    PARITY = 1


@dataclass(frozen=True, eq=False)
class SendChunks:
    """Stream these chunks of ``lane`` (sorted indices); ``retransmit`` for repairs."""

    lane: int
    chunks: np.ndarray
    retransmit: bool = False


@dataclass(frozen=True)
class SendMessage:
    """Send this reliability control message to the peer (the core's own
    :class:`sdr.actions.SendControl` carries encoded bytes to the driver)."""

    message: ControlMessage


@dataclass(frozen=True, eq=False)
class SealChunks:
    """Receiver: these chunks of ``lane`` are verified; no packet may rewrite them."""

    lane: int
    chunks: np.ndarray


@dataclass(frozen=True, eq=False)
class ReopenChunks:
    """Receiver: these chunks of ``lane`` failed their check; accept a repair for them."""

    lane: int
    chunks: np.ndarray


@dataclass(frozen=True)
class Finished:
    """The message is over: verified and complete (``error`` None) or failed."""

    error: SDRError | None = None


@dataclass(frozen=True, eq=False)
class Delivered:
    """Sender: ``nbytes`` of data newly acknowledged; ``rtt_s`` an RTT sample or None.

    The sample follows Karn's rule: ``now`` minus the send time of the newest newly
    acknowledged chunk that was sent once (``sample_chunk``; a chunk sent twice cannot
    tell which copy the receiver saw), less the ACK delay the receiver's SACK reports
    (its hold since the latest arrival, at most our ``ack_interval``; the multipath
    books time their per-path samples themselves). ``chunks``: the
    data chunks, for per-path accounting."""

    nbytes: int
    rtt_s: float | None = None
    chunks: np.ndarray | None = None
    sample_chunk: int | None = None


@dataclass(frozen=True, eq=False)
class Lost:
    """Sender: ``nbytes`` of data declared lost (queued again for a retransmission);
    ``sent_at`` the earliest time they were last sent (for the controller's recovery
    point); ``chunks``: the data chunks, for per-path accounting."""

    nbytes: int
    sent_at: float | None = None
    chunks: np.ndarray | None = None


SchemeAction = SendChunks | SendMessage | SealChunks | ReopenChunks | Finished | Delivered | Lost


class Status(enum.Enum):
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"


def earliest(*times: float | None) -> float | None:
    """The smallest of the finite times given, or None."""
    finite = [t for t in times if t is not None and math.isfinite(t)]
    return min(finite) if finite else None


class Machine(ABC):
    """Common state of a sender or receiver machine of one message."""

    def __init__(self, scheme: Scheme, seq: int, data: memoryview) -> None:
        self.scheme = scheme
        self.config = scheme.config
        self.seq = seq
        self.data = data
        self.geometry = MessageGeometry(len(data), scheme.chunk_size)
        self.status = Status.ACTIVE
        self.error: SDRError | None = None
        self.stats: dict[str, int] = {}
        self._actions: list[SchemeAction] = []

    @property
    def active(self) -> bool:
        return self.status is Status.ACTIVE

    def actions(self) -> list[SchemeAction]:
        """Drain the actions produced since the last call."""
        out, self._actions = self._actions, []
        return out

    def lane_buffer(self, lane: int) -> np.ndarray | None:
        """The buffer this machine owns for ``lane`` (>= 1), registered by the driver."""
        return None

    def has_work(self) -> bool:
        """Whether :meth:`do_work` has CPU work to do (checksums, encoding, decoding)."""
        return False

    def do_work(self, now: float) -> None:  # noqa: B027 - optional hook
        """Do one bounded step of CPU work (drivers interleave it with sending)."""

    @abstractmethod
    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` must be called next (None: no timer armed)."""

    @abstractmethod
    def handle_timer(self, now: float) -> None:
        """Handle every timer that expired at or before ``now``."""

    @abstractmethod
    def on_control(self, now: float, message: ControlMessage) -> None:
        """A control message about this message arrived from the peer."""

    def hold_deadline(self, until: float) -> None:  # noqa: B027 - optional hook
        """Do not give up before ``until``: the connection made progress (under a
        congestion controller every message shares one paced rate, so one that waits its
        turn is not stuck while another moves)."""

    # --- helpers for subclasses ---------------------------------------------------------
    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def send(self, message: ControlMessage) -> None:
        self.count(f"sent_{type(message).__name__.lower()}")
        self._actions.append(SendMessage(message))

    def finish(self, error: SDRError | None = None) -> None:
        """End the machine (once): completed when ``error`` is None, else failed."""
        if not self.active:
            return
        self.status = Status.COMPLETED if error is None else Status.FAILED
        self.error = error
        self._actions.append(Finished(error))


class SchemeSender(Machine):
    """Sender side of one message."""

    rtt: RttEstimator | None = None
    """The sender's RTT estimator, if it samples RTTs (Selective Repeat): the connection
    hands each new write the one its other writes measured."""

    @abstractmethod
    def start(self, now: float) -> None:
        """The receiver is ready (its CTS arrived): begin sending."""

    @abstractmethod
    def on_sent(self, now: float, lane: int, chunks: np.ndarray) -> None:
        """These chunks of ``lane`` were handed to the wire at ``now`` (after pacing)."""

    def end_back_off(self, now: float) -> bool:
        """The path answered (a new RTT sample, from any write of the connection): drop a
        back-off of the RTO, as RFC 6298 ends it at the next valid sample. True when
        timers moved earlier (the connection runs the machine again)."""
        return False


class SchemeReceiver(Machine):
    """Receiver side of one message; ``data`` is the writable receive buffer."""

    gapped: bool = False
    """A chunk is missing below the highest that arrived (a loss under repair): SACKs
    then come every :attr:`~sdr.reliability.config.ReliabilityConfig.ack_delay_gapped`."""

    @abstractmethod
    def on_chunks(self, now: float, lane: int, chunks: np.ndarray) -> None:
        """These chunks of ``lane`` became complete in the receive bitmap."""

    def use_packet_sums(self, lane: int, sums: Callable[[np.ndarray], np.ndarray]) -> None:
        """``sums(chunks)`` gives the CRC-32 of chunks of ``lane`` as their packets were
        placed (int64, -1: not known; :meth:`sdr.chunk_bitmap.ReceiveBitmap.chunk_sums`),
        so that checking them need not read them. A receiver that checks nothing ignores
        it (this default)."""


class Scheme(ABC):
    """A reliability scheme: lane layout plus the sender and receiver machine classes.

    Subclass it (or a built-in one), set ``sender_class`` / ``receiver_class``, and make
    it available with :func:`sdr.reliability.register_scheme`. ``config`` is resolved:
    ``chunk_size`` is set.
    """

    sender_class: ClassVar[type[SchemeSender]]
    receiver_class: ClassVar[type[SchemeReceiver]]
    acks_progressively: ClassVar[bool] = True
    """Whether the receiver acknowledges data as it arrives (Selective Repeat's SACKs), so
    a congestion window may hold the sender back; a scheme that acknowledges a message
    only at its end (Erasure Coding) sets False and is paced by rate alone."""
    nack_holes: ClassVar[bool] = False
    """Whether the receiver NACKs a hole as soon as a later chunk shows it, rather than
    leaving its repair to the sender's RTO (``sr-nack`` sets it; the Selective Repeat
    receiver and the receivers built on it read it)."""

    def __init__(self, config: ReliabilityConfig) -> None:
        if config.chunk_size is None:
            raise SDRError("a Scheme needs a resolved config (chunk_size set)")
        self.config = config
        self.chunk_size: int = config.chunk_size
        self.fingerprint = fingerprint(self.describe())

    @property
    def name(self) -> str:
        return self.config.scheme

    def describe(self) -> str:
        """What both ends must agree on (hashed into the DIGEST's fingerprint)."""
        return f"{self.name} chunk_size={self.config.chunk_size}"

    def lanes(self, length: int) -> tuple[int, ...]:
        """Byte lengths of the lanes of a message of ``length`` bytes (lane 0 = data)."""
        return (length,)

    def sender(self, seq: int, data: memoryview) -> SchemeSender:
        """The sender machine of message ``seq`` whose bytes are ``data``."""
        return self.sender_class(self, seq, data)

    def receiver(self, seq: int, data: memoryview) -> SchemeReceiver:
        """The receiver machine of message ``seq`` landing in ``data``."""
        return self.receiver_class(self, seq, data)

    def before_write(self, now: float, length: int) -> None:  # noqa: B027 - optional hook
        """A write of ``length`` bytes is about to start (a scheme that picks its mode per
        message, like the adaptive one, decides here)."""

    def on_raw_control(self, now: float, data: bytes) -> bool:
        """A control message before decoding; True if the scheme consumed it (its own
        wire messages outside the reliability types, e.g. loss reports)."""
        return False
