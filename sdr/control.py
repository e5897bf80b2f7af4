"""Control messages of the SDR layer itself, and the type-byte ranges of the control path.

Every control message starts with one type byte. Ranges:
  1..15    the SDR core (clear-to-send, CTS request)
  16..63   reliability schemes (sdr.reliability)
  64..255  free for users' own schemes

CTS (clear-to-send), 24 bytes, network byte order:
  type u8 = 1 | version u8 = 1 | generation u8 | pad u8 | msg_id u16 | slot u16 |
  seq u64 (n-th posted receive) | length u64 (bytes posted)

CTS request, 16 bytes: type u8 = 2 | version u8 = 1 | pad 6 | seq u64. A sender whose
message ``seq`` still has no CTS after its retry interval asks again (a CTS lost on the
link would otherwise stall the stream); the receiver answers with the CTS of its
``seq``-th receive if that receive is still posted, and with nothing otherwise.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sdr.errors import RemoteProtocolError

__all__ = [
    "CTS",
    "CTS_TYPE",
    "CTS_REQUEST_TYPE",
    "SDR_TYPES",
    "RELIABILITY_TYPES",
    "decode_cts",
    "decode_cts_request",
    "encode_cts_request",
    "message_type",
]

CTS_TYPE = 1
CTS_REQUEST_TYPE = 2
SDR_TYPES = range(1, 16)
RELIABILITY_TYPES = range(16, 64)
_VERSION = 1
_CTS = struct.Struct("!BBBxHHQQ")
_CTS_REQUEST = struct.Struct("!BB6xQ")


@dataclass(frozen=True, slots=True)
class CTS:
    """The receiver posted its ``seq``-th receive of ``length`` bytes in ``slot``."""

    seq: int
    msg_id: int
    slot: int
    generation: int
    length: int

    def encode(self) -> bytes:
        return _CTS.pack(
            CTS_TYPE, _VERSION, self.generation, self.msg_id, self.slot, self.seq, self.length
        )


def message_type(data: bytes) -> int:
    """The type byte of a control message (ProtocolError when empty)."""
    if not data:
        raise RemoteProtocolError("empty control message")
    return data[0]


def decode_cts(data: bytes) -> CTS:
    """Parse a CTS; ProtocolError names what is wrong."""
    if len(data) != _CTS.size:
        raise RemoteProtocolError(f"CTS must be {_CTS.size} bytes, got {len(data)}")
    kind, version, generation, msg_id, slot, seq, length = _CTS.unpack(data)
    if kind != CTS_TYPE:
        raise RemoteProtocolError(f"not a CTS: type {kind}")
    if version != _VERSION:
        raise RemoteProtocolError(f"CTS version {version} not supported (expected {_VERSION})")
    return CTS(seq, msg_id, slot, generation, length)


def encode_cts_request(seq: int) -> bytes:
    """Ask the peer to send the CTS of its ``seq``-th receive again."""
    return _CTS_REQUEST.pack(CTS_REQUEST_TYPE, _VERSION, seq)


def decode_cts_request(data: bytes) -> int:
    """The receive number a CTS request asks about; ProtocolError names what is wrong."""
    if len(data) != _CTS_REQUEST.size:
        raise RemoteProtocolError(f"CTS request must be {_CTS_REQUEST.size} bytes, got {len(data)}")
    kind, version, seq = _CTS_REQUEST.unpack(data)
    if kind != CTS_REQUEST_TYPE:
        raise RemoteProtocolError(f"not a CTS request: type {kind}")
    if version != _VERSION:
        raise RemoteProtocolError(
            f"CTS request version {version} not supported (expected {_VERSION})"
        )
    return seq
