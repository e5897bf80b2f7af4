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
18  SACK         r -> s     cum u32 | nbits u32 | [ack_delay u32, microseconds: flag 2] |
                            bitmap; bit i (LSB first) is chunk cum+1+i; flag DIGEST_OK
                            (1): the receiver holds the whole digest
19  NACK         r -> s     count u16 | count x (first u32, n u32): chunks to resend now
20  EC_NACK      r -> s     k u16 | count u16 | count x (submessage u32 | ceil(k/8) bytes
                            bitmap of its missing data chunks); flag DIGEST_OK as in SACK
21  PROBE        s -> r     (no body): "tell me where this message stands"
22  ABORT        s -> r     (no body): the sender gave the message up; flag MISMATCH:
                            the posted receive's length differs from the write's
==  ===========  =========  =========================================================

Type 23 (CTS_REQUEST) is retired: the SDR core asks for a lost CTS itself (sdr.control).
The frame and the decoder are in :mod:`sdr.reliability.wire`; SACK, NACK and EC_NACK in
:mod:`sdr.reliability.repair_messages`. Builders split what does not fit one control
message (``MAX_CONTROL_SIZE``) into several.

Work bounds (a forged message must not cost more than its bytes): a message is at most
``MAX_CONTROL_SIZE`` bytes and every decoder does O(its length) work, vectorized. NACK
ranges decode to their union (sorted, disjoint, non-empty, so at most one range per 8
body bytes however often a range repeats) and EC_NACK submessages to one entry each
(duplicates OR their flags). Chunk indices live in [0, 2^32 - 1). What a message *names*
can still be far larger than the message it is about, so a consumer first clips it to
the message (``clipped(n_chunks)`` of SACK, NACK and EC_NACK): then it covers at most
n_chunks distinct chunks, and acting on it is one vectorized pass over them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from sdr.errors import RemoteProtocolError
from sdr.reliability.repair_messages import EcNack, Nack, RangeMessage, Sack
from sdr.reliability.wire import (
    _CHUNK_END,
    _OVERHEAD,
    ControlMessage,
    _need,
    decode_message,
    is_reliability_message,
    register_message_type,
)
from sdr.transport import MAX_CONTROL_SIZE

__all__ = [
    "ControlMessage",
    "RangeMessage",
    "Digest",
    "Ack",
    "Sack",
    "Nack",
    "EcNack",
    "Probe",
    "Abort",
    "decode_message",
    "is_reliability_message",
    "register_message_type",
    "DIGEST_PER_MESSAGE",
]

_DIGEST = struct.Struct("!QIIII")

DIGEST_PER_MESSAGE = (MAX_CONTROL_SIZE - _OVERHEAD - _DIGEST.size) // 4
"""Chunk checksums that fit one DIGEST message."""


@register_message_type
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
            raise RemoteProtocolError(
                f"DIGEST of {count} checksums must be {_DIGEST.size + 4 * count} body bytes, "
                f"got {len(body)}"
            )
        if first + count > _CHUNK_END:
            raise RemoteProtocolError(
                f"DIGEST of chunks [{first}, {first + count}) names chunks past the index "
                f"space, expected an end <= {_CHUNK_END}"
            )
        crcs = np.frombuffer(body, dtype=">u4", offset=_DIGEST.size).astype(np.uint32)
        return cls(seq, length, scheme, chunk_size, first, crcs)


@register_message_type
@dataclass(frozen=True)
class Ack(ControlMessage):
    """The receiver verified the whole message (or, with ``failed``, gave it up)."""

    TYPE: ClassVar[int] = 17
    TO_SENDER: ClassVar[bool] = True
    seq: int
    failed: bool = False

    def _flags(self) -> int:
        return 1 if self.failed else 0

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Ack:
        if len(body):
            raise RemoteProtocolError(f"ACK has no body, got {len(body)} bytes")
        return cls(seq, bool(flags & 1))


@register_message_type
@dataclass(frozen=True)
class Probe(ControlMessage):
    """The sender asks for the receiver's state of the message (answered by SACK/ACK...)."""

    TYPE: ClassVar[int] = 21
    seq: int


@register_message_type
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
            raise RemoteProtocolError(f"ABORT has no body, got {len(body)} bytes")
        return cls(seq, bool(flags & 1))
