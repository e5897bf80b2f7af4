"""The offload engine's wire: a small packet header and pluggable per-channel packet sources.

The engine (:mod:`sdr.backends.offload.engine`) never touches a socket. A worker owns one
:class:`PacketSource` per channel it serves and hands each packet (a memoryview) to the
engine. Sources are built from a picklable *spec* so the application can describe them
to a worker process:

- ``("udp", host)``: a UDP socket bound to ``host`` on a free port (the default wire);
- ``("synthetic", packets)``: a cyclic list of pre-built packets, for measuring the
  per-packet receive work without the kernel (the benchmark's ``--source synthetic``).

Another wire (e.g. RoCEv2 UC over UDP) adds itself with :func:`register_source`.

Packet format (network byte order, 20 bytes, then the payload):
  magic u16 = 0x5D0F | version u8 = 1 | generation u8 | channel u16 | reserved u16 |
  imm u32 | remote_offset u64
"""

from __future__ import annotations

import importlib
import mmap
import socket
import struct
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from sdr.errors import ConfigError, TransportError

__all__ = [
    "HEADER",
    "MAGIC",
    "MALFORMED",
    "MAX_DATAGRAM",
    "PacketSource",
    "STAGED_SLOTS",
    "STAGING_SLOTS",
    "StagingRing",
    "SyntheticSource",
    "UdpSource",
    "encode_header",
    "make_source",
    "parse_header",
    "register_source",
    "staged_ring",
]

MAGIC = 0x5D0F
VERSION = 1
HEADER = struct.Struct("!HBBHHIQ")
MALFORMED = ("malformed",)
"""What a decoding source returns for a packet its wire rejects (counted as malformed)."""
MAX_DATAGRAM = 65507
"""Largest UDP payload over IPv4; the MTU plus the header must fit."""
STAGING_SLOTS = 256
"""Packets a socket source stages before it reuses a buffer: a packet's view stays valid
for the next ``STAGING_SLOTS - 1`` receives, so the engine can place them as one batch."""
_SLOT_BYTES = 1 << 16
STAGED_SLOTS = 64
"""Datagrams one ``recvmmsg`` takes on the staged path (64 x 64 KiB slots, pre-faulted)."""
_NO_ROWS = np.empty(0, dtype=np.int64)


class StagingRing:
    """``STAGING_SLOTS`` receive buffers in one anonymous mapping (pages are touched only
    as far as packets reach, so 16 MiB of address space costs about the packets' size)."""

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, STAGING_SLOTS * _SLOT_BYTES)
        self._view = memoryview(self._map)
        self._next = 0

    def next_buffer(self) -> memoryview:
        """The buffer the next packet goes into (valid for STAGING_SLOTS - 1 more calls)."""
        at = self._next * _SLOT_BYTES
        self._next = (self._next + 1) % STAGING_SLOTS
        return self._view[at : at + MAX_DATAGRAM]


def encode_header(generation: int, channel: int, imm: int, remote_offset: int) -> bytes:
    """The 20-byte header of one write-with-immediate packet."""
    return HEADER.pack(MAGIC, VERSION, generation, channel, 0, imm, remote_offset)


def parse_header(packet: memoryview) -> tuple[int, int, int, int] | None:
    """(generation, channel, imm, remote_offset) of a packet, or None when malformed."""
    if len(packet) < HEADER.size:
        return None
    magic, version, generation, channel, _, imm, remote = HEADER.unpack_from(packet)
    if magic != MAGIC or version != VERSION:
        return None
    return generation, channel, imm, remote


class PacketSource(Protocol):
    """Where one channel's packets come from (a socket, a ring, a generator)."""

    def fileno(self) -> int:
        """A descriptor that becomes readable when packets wait (-1: always ready)."""

    def recv(self) -> Any:
        """The next packet, or None when none is waiting. Valid until the next call.

        A raw packet (memoryview in this module's format), or, from a source whose
        ``decoded`` attribute is True, ``(generation, imm, remote_offset, payload)`` or
        :data:`MALFORMED`.

        A source may also offer ``recv_staged(max_count) -> (taken, batch)``, which the
        native datapath uses: up to ``max_count`` packets at once, valid until the next
        call; ``batch`` is ``(staging, offsets, lengths)`` (raw packets in one buffer), or
        from a decoding source ``(malformed, (staging, generations, imms, remotes,
        payload_offsets, lengths))`` (see ``ChannelEngine.place_staged``).
        """

    def address(self) -> Any:
        """Where peers send to (JSON-serialisable), or None."""

    def close(self) -> None:
        """Release the source."""


class UdpSource:
    """A non-blocking UDP socket: one datagram is one packet."""

    def __init__(self, host: str = "127.0.0.1", rcvbuf: int = 32 << 20) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.bind((host, 0))
        except OSError as exc:
            self.sock.close()
            raise TransportError(f"cannot bind a UDP socket on {host!r}: {exc}") from exc
        self.sock.setblocking(False)
        self._staging = StagingRing()
        self.staging_slots = STAGING_SLOTS
        self._ring: Any = None  # the staged path's recvmmsg ring, made on first use
        if not _mmsg_available():
            self.recv_staged = None  # type: ignore[assignment]  # no recvmmsg: per packet

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv(self) -> memoryview | None:
        buffer = self._staging.next_buffer()
        try:
            n = self.sock.recv_into(buffer)
        except (BlockingIOError, InterruptedError):
            return None
        return buffer[:n]

    def recv_staged(self, max_count: int) -> tuple[int, tuple[Any, np.ndarray, np.ndarray]]:
        """Up to ``max_count`` datagrams with one ``recvmmsg`` (never truncated: a slot
        holds the largest datagram)."""
        ring = self._ring = self._ring or staged_ring()
        got = ring.receive(self.sock, max_count)
        offsets = np.arange(got, dtype=np.int64) * ring.slot_size
        return got, (ring.view, offsets, ring.lengths(got))

    def address(self) -> Any:
        return list(self.sock.getsockname())

    def close(self) -> None:
        self.sock.close()


class SyntheticSource:
    """Pre-built packets handed out in a cycle, ``rounds`` times (0: forever)."""

    def __init__(self, packets: list[bytes], rounds: int = 0) -> None:
        if not packets:
            raise ConfigError("a synthetic source needs at least one packet")
        self._packets = [memoryview(p) for p in packets]
        self._left = rounds * len(packets) if rounds else -1
        self._next = 0
        self._lengths = np.array([len(p) for p in self._packets], dtype=np.int64)
        self._offsets = np.cumsum(self._lengths) - self._lengths
        self._flat = b"".join(self._packets)

    def fileno(self) -> int:
        return -1

    def recv(self) -> memoryview | None:
        if self._left == 0:
            return None
        self._left -= 1
        packet = self._packets[self._next]
        self._next = (self._next + 1) % len(self._packets)
        return packet

    def recv_staged(self, max_count: int) -> tuple[int, tuple[Any, np.ndarray, np.ndarray]]:
        """The next ``max_count`` packets of the cycle, as views of one buffer."""
        count = max_count if self._left < 0 else min(max_count, self._left)
        if count <= 0:
            return 0, (self._flat, _NO_ROWS, _NO_ROWS)
        n = len(self._packets)
        rows = (self._next + np.arange(count, dtype=np.int64)) % n
        self._next = (self._next + count) % n
        if self._left > 0:
            self._left -= count
        return count, (self._flat, self._offsets[rows], self._lengths[rows])

    def address(self) -> Any:
        return None

    def close(self) -> None:
        self._packets = []
        self._left = 0


def _mmsg_available() -> bool:
    from sdr.backends.udp.mmsg import available

    return available()


def staged_ring() -> Any:
    """A ``recvmmsg`` ring of :data:`STAGED_SLOTS` slots that hold any UDP datagram."""
    from sdr.backends.udp.mmsg import RecvRing  # Linux batch I/O through ctypes

    return RecvRing(STAGED_SLOTS, _SLOT_BYTES)


_SOURCES: dict[str, Callable[..., PacketSource]] = {
    "udp": UdpSource,
    "synthetic": SyntheticSource,
}


_PLUGINS = {"roce": "sdr.backends.offload.roce_wire"}
"""Source kinds defined in modules that register themselves when imported."""


def register_source(kind: str, factory: Callable[..., PacketSource]) -> None:
    """Make ``(kind, *args)`` specs build sources with ``factory(*args)``."""
    _SOURCES[kind] = factory


def make_source(spec: tuple[Any, ...]) -> PacketSource:
    """Build a packet source from its spec, e.g. ``("udp", "127.0.0.1")``."""
    kind, *args = spec
    if kind not in _SOURCES and kind in _PLUGINS:  # e.g. in a fresh worker process
        importlib.import_module(_PLUGINS[kind])
    factory = _SOURCES.get(kind)
    if factory is None:
        known = ", ".join(sorted(_SOURCES))
        raise ConfigError(f"unknown packet source {kind!r}; known: {known}")
    return factory(*args)
