"""Control messages of the reliability schemes and their compact binary codec.

Every message, network byte order::

    type u8 | version u8 | flags u16 | seq u64 | body ... | crc32 u32

``seq`` is the reliable message's sequence number (the n-th write matches the n-th posted
receive). The trailing CRC-32 covers header and body, so a damaged control message is
dropped (ProtocolError), never acted on. Types (the 16..63 range of sdr.control):

==  ===========  =========  =========================================================
16  DIGEST       s -> r     length u64 | scheme u32 | chunk_size u32 | first u32 |
                            count u32 | count x crc32 u32 (one per data chunk)
17  ACK          r -> s     (no body); flag FAILED: the receiver gave the message up
18  SACK         r -> s     cum u32 | nbits u32 | bitmap; bit i (LSB first) is chunk
                            cum+1+i; flag DIGEST_OK: the receiver holds the whole digest
19  NACK         r -> s     count u16 | count x (first u32, n u32): chunks to resend now
20  EC_NACK      r -> s     k u16 | count u16 | count x (submessage u32 | ceil(k/8) bytes
                            bitmap of its missing data chunks); flag DIGEST_OK as in SACK
21  PROBE        s -> r     (no body): "tell me where this message stands"
22  ABORT        s -> r     (no body): the sender gave the message up; flag MISMATCH:
                            the posted receive's length differs from the write's
23  CTS_REQUEST  s -> r     sdr_seq u64: please resend the CTS of this SDR receive
==  ===========  =========  =========================================================

Builders split what does not fit one control message (``MAX_CONTROL_SIZE``) into several.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from sdr.control import RELIABILITY_TYPES
from sdr.errors import ProtocolError
from sdr.reliability.geometry import chunk_runs
from sdr.transport import MAX_CONTROL_SIZE

__all__ = [
    "ControlMessage",
    "Digest",
    "Ack",
    "Sack",
    "Nack",
    "EcNack",
    "Probe",
    "Abort",
    "CtsRequest",
    "decode_message",
    "is_reliability_message",
    "DIGEST_PER_MESSAGE",
]

VERSION = 1
_HEADER = struct.Struct("!BBHQ")
_TRAILER = struct.Struct("!I")
_OVERHEAD = _HEADER.size + _TRAILER.size
_DIGEST = struct.Struct("!QIIII")
_SACK = struct.Struct("!II")
_RANGE = struct.Struct("!II")
_COUNT = struct.Struct("!H")
_EC = struct.Struct("!HH")
_SEQ = struct.Struct("!Q")

DIGEST_PER_MESSAGE = (MAX_CONTROL_SIZE - _OVERHEAD - _DIGEST.size) // 4
"""Chunk checksums that fit one DIGEST message."""

_SACK_MAX_BITS = (MAX_CONTROL_SIZE - _OVERHEAD - _SACK.size) * 8
_NACK_MAX_RANGES = (MAX_CONTROL_SIZE - _OVERHEAD - _COUNT.size) // _RANGE.size


class ControlMessage:
    """Base of the reliability control messages: a type byte, flags and a message seq."""

    TYPE: ClassVar[int] = 0
    seq: int

    def _flags(self) -> int:
        return 0

    def _body(self) -> bytes:
        return b""

    def encode(self) -> bytes:
        """The wire form: header, body and CRC-32 trailer."""
        head = _HEADER.pack(self.TYPE, VERSION, self._flags(), self.seq)
        data = head + self._body()
        return data + _TRAILER.pack(zlib.crc32(data))

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> ControlMessage:
        if len(body):
            raise ProtocolError(f"{cls.__name__} has no body, got {len(body)} bytes")
        return cls(seq)  # type: ignore[call-arg]


@dataclass(frozen=True, eq=False)
class Digest(ControlMessage):
    """Length, scheme fingerprint and per-chunk CRC-32s of chunks [first, first+len(crcs))."""

    TYPE: ClassVar[int] = 16
    seq: int
    length: int
    scheme: int
    chunk_size: int
    first: int
    crcs: np.ndarray = field(repr=False)

    def _body(self) -> bytes:
        head = _DIGEST.pack(self.length, self.scheme, self.chunk_size, self.first, len(self.crcs))
        return head + self.crcs.astype(">u4").tobytes()

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Digest:
        _need(body, _DIGEST.size, "DIGEST")
        length, scheme, chunk_size, first, count = _DIGEST.unpack_from(body)
        if len(body) != _DIGEST.size + 4 * count:
            raise ProtocolError(
                f"DIGEST of {count} checksums must be {_DIGEST.size + 4 * count} body bytes, "
                f"got {len(body)}"
            )
        crcs = np.frombuffer(body, dtype=">u4", offset=_DIGEST.size).astype(np.uint32)
        return cls(seq, length, scheme, chunk_size, first, crcs)


@dataclass(frozen=True)
class Ack(ControlMessage):
    """The receiver verified the whole message (or, with ``failed``, gave it up)."""

    TYPE: ClassVar[int] = 17
    seq: int
    failed: bool = False

    def _flags(self) -> int:
        return 1 if self.failed else 0

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Ack:
        if len(body):
            raise ProtocolError(f"ACK has no body, got {len(body)} bytes")
        return cls(seq, bool(flags & 1))


@dataclass(frozen=True, eq=False)
class Sack(ControlMessage):
    """Cumulative ACK (chunks below ``cum`` arrived) plus a selective bitmap after it.

    ``bits[i]`` says whether chunk ``cum + 1 + i`` arrived; chunks past the bitmap are
    unknown. ``digest_ok``: the receiver holds every checksum of the message.
    """

    TYPE: ClassVar[int] = 18
    seq: int
    cum: int
    bits: np.ndarray = field(repr=False)
    digest_ok: bool = True

    def _flags(self) -> int:
        return 1 if self.digest_ok else 0

    def _body(self) -> bytes:
        packed = np.packbits(self.bits.astype(bool), bitorder="little").tobytes()
        return _SACK.pack(self.cum, len(self.bits)) + packed

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Sack:
        _need(body, _SACK.size, "SACK")
        cum, nbits = _SACK.unpack_from(body)
        if len(body) != _SACK.size + -(-nbits // 8):
            raise ProtocolError(f"SACK of {nbits} bits has a {len(body)}-byte body")
        raw = np.frombuffer(body, dtype=np.uint8, offset=_SACK.size)
        bits = np.unpackbits(raw, count=nbits, bitorder="little").astype(bool)
        return cls(seq, cum, bits, bool(flags & 1))

    def clipped(self, n_chunks: int) -> Sack:
        """This SACK limited to a message of ``n_chunks`` chunks (a forged or damaged SACK
        may claim up to 2^32 chunks; expanding that would take gigabytes)."""
        if self.cum + 1 + len(self.bits) <= n_chunks:
            return self
        cum = min(self.cum, n_chunks)
        return Sack(self.seq, cum, self.bits[: max(0, n_chunks - cum - 1)], self.digest_ok)

    def acked(self) -> np.ndarray:
        """Indices of the chunks this SACK reports as arrived."""
        head = np.arange(self.cum, dtype=np.int64)
        return np.concatenate([head, self.cum + 1 + np.flatnonzero(self.bits)])

    @classmethod
    def build(cls, seq: int, have: np.ndarray, digest_ok: bool) -> Sack:
        """The SACK for arrival mask ``have``, with as much bitmap as fits one message."""
        missing = np.flatnonzero(~have)
        cum = int(missing[0]) if len(missing) else len(have)
        tail = have[cum + 1 : cum + 1 + _SACK_MAX_BITS]
        last = np.flatnonzero(tail)
        return cls(seq, cum, tail[: int(last[-1]) + 1 if len(last) else 0].copy(), digest_ok)


@dataclass(frozen=True, eq=False)
class Nack(ControlMessage):
    """Chunks the receiver asks to have resent now (holes, or chunks that failed checks)."""

    TYPE: ClassVar[int] = 19
    seq: int
    ranges: tuple[tuple[int, int], ...]

    def _body(self) -> bytes:
        parts = [_COUNT.pack(len(self.ranges))]
        parts += [_RANGE.pack(first, n) for first, n in self.ranges]
        return b"".join(parts)

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Nack:
        _need(body, _COUNT.size, "NACK")
        (count,) = _COUNT.unpack_from(body)
        if len(body) != _COUNT.size + count * _RANGE.size:
            raise ProtocolError(f"NACK of {count} ranges has a {len(body)}-byte body")
        ranges = tuple(
            _RANGE.unpack_from(body, _COUNT.size + i * _RANGE.size) for i in range(count)
        )
        return cls(seq, ranges)

    def clipped(self, n_chunks: int) -> Nack:
        """This NACK limited to chunks below ``n_chunks`` (see :meth:`Sack.clipped`)."""
        if all(first + n <= n_chunks for first, n in self.ranges):
            return self
        ranges = tuple(
            (first, min(n, n_chunks - first)) for first, n in self.ranges if first < n_chunks
        )
        return Nack(self.seq, ranges)

    def chunks(self) -> np.ndarray:
        """The chunk indices the ranges cover."""
        if not self.ranges:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([np.arange(f, f + n, dtype=np.int64) for f, n in self.ranges])

    @classmethod
    def build(cls, seq: int, chunks: np.ndarray) -> list[Nack]:
        """NACKs covering ``chunks`` (sorted indices), split to fit control messages."""
        runs = chunk_runs(np.asarray(chunks, dtype=np.int64))
        return [
            cls(seq, tuple(runs[i : i + _NACK_MAX_RANGES]))
            for i in range(0, len(runs), _NACK_MAX_RANGES)
        ]


@dataclass(frozen=True, eq=False)
class EcNack(ControlMessage):
    """Submessages that cannot be decoded, each with the bitmap of its missing data chunks."""

    TYPE: ClassVar[int] = 20
    seq: int
    k: int
    missing: dict[int, np.ndarray]
    """submessage index -> bool array of k flags (True: data chunk j is missing)."""
    digest_ok: bool = True

    def _flags(self) -> int:
        return 1 if self.digest_ok else 0

    def _body(self) -> bytes:
        parts = [_EC.pack(self.k, len(self.missing))]
        for sub, flags in sorted(self.missing.items()):
            mask = np.zeros(self.k, dtype=bool)
            mask[: len(flags)] = flags
            parts.append(struct.pack("!I", sub) + np.packbits(mask, bitorder="little").tobytes())
        return b"".join(parts)

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> EcNack:
        _need(body, _EC.size, "EC_NACK")
        k, count = _EC.unpack_from(body)
        entry = 4 + -(-k // 8)
        if k < 1 or len(body) != _EC.size + count * entry:
            raise ProtocolError(
                f"EC_NACK of {count} submessages (k={k}): bad {len(body)}-byte body"
            )
        missing = {}
        for i in range(count):
            at = _EC.size + i * entry
            (sub,) = struct.unpack_from("!I", body, at)
            raw = np.frombuffer(body, dtype=np.uint8, count=entry - 4, offset=at + 4)
            missing[sub] = np.unpackbits(raw, count=k, bitorder="little").astype(bool)
        return cls(seq, k, missing, bool(flags & 1))

    def chunks(self) -> np.ndarray:
        """Global data chunk indices the NACK asks for (submessage s covers s*k .. s*k+k-1)."""
        parts = [s * self.k + np.flatnonzero(f) for s, f in sorted(self.missing.items())]
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)

    @classmethod
    def build(
        cls, seq: int, k: int, missing: dict[int, np.ndarray], digest_ok: bool = True
    ) -> list[EcNack]:
        """EC_NACKs for these failed submessages, split to fit control messages."""
        per = (MAX_CONTROL_SIZE - _OVERHEAD - _EC.size) // (4 + -(-k // 8))
        items = sorted(missing.items())
        return [cls(seq, k, dict(items[i : i + per]), digest_ok) for i in range(0, len(items), per)]


@dataclass(frozen=True)
class Probe(ControlMessage):
    """The sender asks for the receiver's state of the message (answered by SACK/ACK...)."""

    TYPE: ClassVar[int] = 21
    seq: int


@dataclass(frozen=True)
class Abort(ControlMessage):
    """The sender gave the message up: the receiver fails it too.

    ``mismatch``: because the posted receive's length differs from the write's (else its
    global timeout).
    """

    TYPE: ClassVar[int] = 22
    seq: int
    mismatch: bool = False

    def _flags(self) -> int:
        return 1 if self.mismatch else 0

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Abort:
        if len(body):
            raise ProtocolError(f"ABORT has no body, got {len(body)} bytes")
        return cls(seq, bool(flags & 1))


@dataclass(frozen=True)
class CtsRequest(ControlMessage):
    """The sender waited too long for the CTS of SDR receive ``sdr_seq``: resend it."""

    TYPE: ClassVar[int] = 23
    seq: int
    sdr_seq: int

    def _body(self) -> bytes:
        return _SEQ.pack(self.sdr_seq)

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> CtsRequest:
        if len(body) != _SEQ.size:
            raise ProtocolError(f"CTS_REQUEST body must be {_SEQ.size} bytes, got {len(body)}")
        return cls(seq, _SEQ.unpack_from(body)[0])


_TYPES: dict[int, type[ControlMessage]] = {
    cls.TYPE: cls for cls in (Digest, Ack, Sack, Nack, EcNack, Probe, Abort, CtsRequest)
}


def is_reliability_message(data: bytes) -> bool:
    """Whether ``data`` carries a type byte in the reliability range (16..63)."""
    return bool(data) and data[0] in RELIABILITY_TYPES


def decode_message(data: bytes) -> ControlMessage:
    """Parse one control message; ProtocolError says what is wrong with it."""
    if len(data) < _OVERHEAD:
        raise ProtocolError(f"control message of {len(data)} bytes, expected >= {_OVERHEAD}")
    view = memoryview(data)
    (crc,) = _TRAILER.unpack_from(view, len(view) - _TRAILER.size)
    if zlib.crc32(view[: -_TRAILER.size]) != crc:
        raise ProtocolError("control message checksum mismatch (damaged in transit)")
    kind, version, flags, seq = _HEADER.unpack_from(view)
    if version != VERSION:
        raise ProtocolError(f"reliability message version {version}, expected {VERSION}")
    cls = _TYPES.get(kind)
    if cls is None:
        raise ProtocolError(
            f"unknown reliability message type {kind}, expected one of {sorted(_TYPES)}"
        )
    return cls._parse(seq, flags, view[_HEADER.size : -_TRAILER.size])


def _need(body: memoryview, size: int, what: str) -> None:
    if len(body) < size:
        raise ProtocolError(f"{what} body must be >= {size} bytes, got {len(body)}")
