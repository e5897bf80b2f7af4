"""The reliability control messages' frame: header, CRC-32 trailer, type registry, decoder.

Every message, network byte order::

    type u8 | version u8 | flags u16 | seq u64 | body ... | crc32 u32

The message classes live in :mod:`sdr.reliability.messages` (status and repair requests
in :mod:`sdr.reliability.repair_messages`); each registers its type byte here with
:func:`register_message_type`, which a scheme with messages of its own calls too (types
16..63, sdr.control's reliability range).
"""

from __future__ import annotations

import struct
import zlib
from typing import ClassVar

from sdr.control import RELIABILITY_TYPES
from sdr.errors import ConfigError, RemoteProtocolError
from sdr.transport import MAX_CONTROL_SIZE

__all__ = [
    "ControlMessage",
    "register_message_type",
    "decode_message",
    "is_reliability_message",
    "VERSION",
]

VERSION = 1
_HEADER = struct.Struct("!BBHQ")
_TRAILER = struct.Struct("!I")
_OVERHEAD = _HEADER.size + _TRAILER.size
_CHUNK_END = 2**32 - 1
"""Chunk indices a control message can name are [0, _CHUNK_END): a range's end fits u32."""


class ControlMessage:
    """Base of the reliability control messages: a type byte, flags and a message seq."""

    TYPE: ClassVar[int] = 0
    TO_SENDER: ClassVar[bool] = False
    """Receiver -> sender (ACK, SACK, NACK, EC_NACK); else sender -> receiver."""
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
            raise RemoteProtocolError(f"{cls.__name__} has no body, got {len(body)} bytes")
        return cls(seq)  # type: ignore[call-arg]


_TYPES: dict[int, type[ControlMessage]] = {}


def register_message_type(cls: type[ControlMessage]) -> type[ControlMessage]:
    """Make ``decode_message`` parse type ``cls.TYPE`` as ``cls`` (usable as a decorator).

    ConfigError if the type is outside the reliability range or already taken."""
    kind = cls.TYPE
    if kind not in RELIABILITY_TYPES:
        raise ConfigError(
            f"{cls.__name__}.TYPE {kind} is outside the reliability range "
            f"{RELIABILITY_TYPES.start}..{RELIABILITY_TYPES.stop - 1}"
        )
    held = _TYPES.get(kind)
    if held is not None and held is not cls:
        raise ConfigError(f"message type {kind} is already {held.__name__}")
    _TYPES[kind] = cls
    return cls


def is_reliability_message(data: bytes) -> bool:
    """Whether ``data`` carries a type byte in the reliability range (16..63)."""
    return bool(data) and data[0] in RELIABILITY_TYPES


def decode_message(data: bytes) -> ControlMessage:
    """Parse one control message; ProtocolError says what is wrong with it."""
    if not _OVERHEAD <= len(data) <= MAX_CONTROL_SIZE:
        raise RemoteProtocolError(
            f"control message of {len(data)} bytes, expected >= {_OVERHEAD} and "
            f"<= {MAX_CONTROL_SIZE}"
        )
    view = memoryview(data)
    (crc,) = _TRAILER.unpack_from(view, len(view) - _TRAILER.size)
    if zlib.crc32(view[: -_TRAILER.size]) != crc:
        raise RemoteProtocolError("control message checksum mismatch (damaged in transit)")
    kind, version, flags, seq = _HEADER.unpack_from(view)
    if version != VERSION:
        raise RemoteProtocolError(f"reliability message version {version}, expected {VERSION}")
    cls = _TYPES.get(kind)
    if cls is None:
        raise RemoteProtocolError(
            f"unknown reliability message type {kind}, expected one of {sorted(_TYPES)}"
        )
    return cls._parse(seq, flags, view[_HEADER.size : -_TRAILER.size])


def _need(body: memoryview, size: int, what: str) -> None:
    if len(body) < size:
        raise RemoteProtocolError(f"{what} body must be >= {size} bytes, got {len(body)}")
