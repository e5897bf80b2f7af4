"""The transport interface drivers implement, and the records that cross it.

A driver is the NIC of this design (core-interfaces.md): it registers memory, keeps the
receive key table, puts single-packet writes-with-immediate on the wire (paced), places
arriving payload into registered memory and reports one completion per accepted packet.
The core decides *what* to send and keeps message state; it never copies payload.

Records are column batches (NumPy arrays) so that neither side pays a Python object per
packet: a driver loops over plain lists in its own tight loop, the core processes whole
batches with vectorized code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from sdr.config import QPAttr
from sdr.errors import ConfigError

__all__ = [
    "MemoryRegion",
    "Bind",
    "WriteBatch",
    "CompletionBatch",
    "Transport",
    "TransportQP",
    "MAX_CONTROL_SIZE",
    "as_byte_view",
    "concat_completions",
]

MAX_CONTROL_SIZE = 4096
"""Largest control message in bytes (CTS, ACK, NACK ...); a small-message channel."""


def as_byte_view(buffer: object) -> memoryview:
    """A writable, flat byte view of any buffer-protocol object (NumPy first), or of a
    tensor through DLPack (see :mod:`sdr.dlpack`: GPU arrays are staged in pinned memory).

    Raises ConfigError for read-only or non-contiguous buffers, which cannot be
    registered as RDMA memory either.
    """
    try:
        view = memoryview(buffer)  # type: ignore[arg-type]
    except TypeError as exc:
        from sdr.dlpack import dlpack_byte_view  # tensors: DLPack (CPU), pinned staging (GPU)

        tensor_view = dlpack_byte_view(buffer)
        if tensor_view is None:
            raise ConfigError(
                f"cannot register {type(buffer).__name__}: not a buffer-protocol object "
                "(use a NumPy array, bytearray, mmap, memoryview or a DLPack tensor)"
            ) from exc
        view = tensor_view
    if view.readonly:
        raise ConfigError(f"cannot register a read-only {type(buffer).__name__} buffer")
    if not view.c_contiguous:
        raise ConfigError(f"cannot register a non-contiguous {type(buffer).__name__} buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


@dataclass(eq=False)
class MemoryRegion:
    """Registered memory: a key, a length and a writable byte view (the paper's mr_reg)."""

    key: int
    view: memoryview
    owner: object = field(default=None, repr=False)

    @property
    def length(self) -> int:
        return len(self.view)

    def check_range(self, offset: int, length: int | None) -> int:
        """Validate [offset, offset+length) against the region; returns the length."""
        if length is None:
            length = self.length - offset
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ConfigError(
                f"range [{offset}, {offset + length}) is outside the registered region "
                f"of {self.length} bytes"
            )
        return length


@dataclass(frozen=True, slots=True, kw_only=True)
class Bind:
    """One binding: key-table entry (generation, slot) names message ``msg_id`` at
    ``region[offset:offset+length]``.

    The record crosses the interface whole, like a batch: the core hands it to the
    driver as an action (:mod:`sdr.actions`), the driver loop passes it to
    :meth:`TransportQP.bind`, and a software driver passes it on to its key table
    (:meth:`sdr.key_table.KeyTable.bind`). Its fields are keyword-only: a binding is
    always made with its six numbers named, never in an order to get wrong.
    """

    generation: int
    slot: int
    region: MemoryRegion
    offset: int
    length: int
    msg_id: int

    def check(self, slot_size: int) -> None:
        """The range check of every ``bind``: ConfigError unless the bound bytes lie in
        the region and fit one slot of ``slot_size`` bytes."""
        self.region.check_range(self.offset, self.length)
        if self.length > slot_size:
            raise ConfigError(f"binding of {self.length} bytes exceeds slot size {slot_size}")


@dataclass(frozen=True, eq=False)
class WriteBatch:
    """Single-packet writes-with-immediate from one source region on one generation.

    remote_offsets address the receiver's zero-based key space: slot * max_message_size
    + byte offset in the message. A zero length is an immediate-only packet.
    """

    region: MemoryRegion
    generation: int
    channels: np.ndarray  # uint16
    remote_offsets: np.ndarray  # int64
    imms: np.ndarray  # uint32
    src_offsets: np.ndarray  # int64
    lengths: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.imms)

    @property
    def payload_bytes(self) -> int:
        return int(self.lengths.sum())


@dataclass(frozen=True, eq=False)
class CompletionBatch:
    """Receive completions, one row per packet whose payload was placed.

    remote_offset is -1 where the transport cannot tell (verbs completions do not carry
    it); when known, the core cross-checks it against the immediate.

    validated: every row was placed through :func:`sdr.placement.place_batch` against the
    key table this QP's core bound (software drivers), so the core only matches rows to
    receives; False (the default) makes the core check each row itself.

    crcs: zlib's CRC-32 of each row's payload as it was placed (int64; -1 where not
    known), or None (the default) where the driver did not compute them. A driver that
    gives them promises the bytes it placed are the bytes it checksummed: the core then
    combines a chunk's checksum from its packets' instead of reading the chunk again.
    """

    channels: np.ndarray  # uint16
    generations: np.ndarray  # uint8
    imms: np.ndarray  # uint32
    byte_lens: np.ndarray  # int64
    remote_offsets: np.ndarray  # int64
    validated: bool = False
    crcs: np.ndarray | None = None  # int64

    def __len__(self) -> int:
        return len(self.imms)

    @classmethod
    def empty(cls) -> CompletionBatch:
        return cls.from_rows([])

    @classmethod
    def from_rows(cls, rows: list[tuple[int, int, int, int, int]]) -> CompletionBatch:
        """Build from (channel, generation, imm, byte_len, remote_offset) tuples."""
        if not rows:
            cols: list[list[int]] = [[], [], [], [], []]
        else:
            cols = [list(c) for c in zip(*rows, strict=True)]
        return cls(
            np.array(cols[0], dtype=np.uint16),
            np.array(cols[1], dtype=np.uint8),
            np.array(cols[2], dtype=np.uint32),
            np.array(cols[3], dtype=np.int64),
            np.array(cols[4], dtype=np.int64),
        )


def concat_completions(parts: list[CompletionBatch]) -> CompletionBatch:
    """One batch of the rows of ``parts``, in order (validated only if every part is)."""
    return CompletionBatch(
        channels=np.concatenate([p.channels for p in parts]),
        generations=np.concatenate([p.generations for p in parts]),
        imms=np.concatenate([p.imms for p in parts]),
        byte_lens=np.concatenate([p.byte_lens for p in parts]),
        remote_offsets=np.concatenate([p.remote_offsets for p in parts]),
        validated=all(p.validated for p in parts),
        crcs=_concat_crcs(parts),
    )


def _concat_crcs(parts: list[CompletionBatch]) -> np.ndarray | None:
    """The parts' CRCs in one column (-1 for the rows of a part without), None if none has."""
    if all(p.crcs is None for p in parts):
        return None
    return np.concatenate(
        [np.full(len(p), -1, np.int64) if p.crcs is None else p.crcs for p in parts]
    )


class TransportQP(ABC):
    """One SDR QP's transport side: channels x generations of endpoints plus a control path."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """JSON-serialisable addressing info for the peer (QPNs, addresses, keys)."""

    @abstractmethod
    def connect(self, remote: dict[str, Any]) -> None:
        """Connect to the peer described by its :meth:`info`."""

    @abstractmethod
    def bind(self, binding: Bind) -> None:
        """Point key-table entry (generation, slot) at the binding's message and bytes;
        ConfigError for bytes outside the region or past a slot (:meth:`Bind.check`)."""

    @abstractmethod
    def unbind(self, generation: int, slot: int) -> None:
        """Point key-table entry (generation, slot) at NULL: later payloads are discarded."""

    guards_placement: ClassVar[bool] = False
    """True when the driver places each packet at most once and honours :meth:`seal` and
    :meth:`reopen` (every software driver: a KeyTable guard). A driver whose NIC writes
    payload itself (verbs) cannot refuse a write; there the NULL key and the generations
    guard late packets, and the receiver's final digest check guards the bytes."""

    def seal(self, generation: int, slot: int, start: int, stop: int) -> None:  # noqa: B027
        """Refuse packets [start, stop) of the message bound at (generation, slot): their
        chunk is verified, its bytes are final."""

    def reopen(self, generation: int, slot: int, start: int, stop: int) -> None:  # noqa: B027
        """Accept packets [start, stop) once more: their chunk failed its check."""

    @abstractmethod
    def send_budget(self, now: float) -> int:
        """Packets the sender may post now without exceeding the rate limit."""

    def send_budget_now(self, now: float) -> int:
        """As :meth:`send_budget`, but without waiting for a whole batch where the pacer
        sends in batches: what a message that must leave at once may take (a deadline
        allreduce's note). Default: :meth:`send_budget`."""
        return self.send_budget(now)

    def next_send_time(self, now: float) -> float | None:
        """When the pacer next allows a batch of packets (``now`` if it already does);
        None: this transport cannot say (the driver then polls while data waits)."""
        return None

    def set_pacing_rate(self, now: float, bits_per_s: float) -> None:  # noqa: B027
        """Pace at ``bits_per_s`` from ``now`` on (a congestion controller's rate, set by
        the driver loop when it changes); a transport paced by its NIC alone ignores it."""

    @abstractmethod
    def post_writes(self, batch: WriteBatch) -> None:
        """Put these packets on the wire (round-robin channels are already assigned)."""

    @abstractmethod
    def poll_completions(self, max_packets: int) -> CompletionBatch:
        """Completions of packets placed since the last poll, at most ``max_packets``."""

    @abstractmethod
    def send_control(self, data: bytes) -> None:
        """Send one small control message (unreliable, like the paper's control QP)."""

    @abstractmethod
    def poll_control(self) -> list[bytes]:
        """Control messages received since the last poll."""

    def counters(self) -> dict[str, int]:
        """Driver-side discards (late, out_of_range, malformed ...), merged into QP counters."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release sockets and keys."""


class Transport(ABC):
    """A backend: owns memory registration, endpoints, sockets and the clock."""

    name: ClassVar[str] = "abstract"

    @abstractmethod
    def now(self) -> float:
        """The driver's clock in seconds (monotonic, or simulated)."""

    @abstractmethod
    def register(self, buffer: object) -> MemoryRegion:
        """Register a writable buffer for sending from and receiving into."""

    @abstractmethod
    def create_qp(self, attr: QPAttr) -> TransportQP:
        """Create the transport side of one SDR QP."""

    def wait(self, timeout: float) -> None:  # noqa: B027 - optional hook
        """Block up to ``timeout`` seconds until I/O may be ready (default: return at once)."""

    can_interrupt: ClassVar[bool] = False
    """Whether :meth:`interrupt` ends a :meth:`wait` in progress (a thread that waits
    where it cannot must wake on its own, often: see ``SdrLinks``)."""

    def interrupt(self) -> None:  # noqa: B027 - optional hook
        """Make a :meth:`wait` in progress on another thread return now, or the next one
        at once if none is (a self-pipe's byte): work was posted that its waiter's
        timers do not know about yet. Only meaningful where :attr:`can_interrupt`."""

    can_hold: ClassVar[bool] = False
    """Whether :meth:`hold` can leave arrivals waiting (socket buffers can; a simulated
    wire that delivers into the QP cannot)."""

    def hold(self, seconds: float) -> None:  # noqa: B027 - optional hook
        """Let up to ``seconds`` pass without waking for arrivals, which wait in the
        transport meanwhile (a driver's coalescing, see ``ReliableQP.hold``); only
        called where :attr:`can_hold`."""

    def maybe_readable(self) -> bool:
        """Whether a packet or control message may be waiting to be read (True when the
        transport cannot tell cheaply: the driver then runs another round at once)."""
        return True

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release every resource of this transport."""
