"""Receive addresses and rkeys carried with the CTS, and the sender's table of them.

The core's CTS names (generation, slot, length). Verbs writes need the receiver's virtual
address and rkey too, so the verbs transport prefixes every control datagram with a
frame byte and, on a CTS, the key of the entry just bound:

  plain frame:  0x00 | upper message
  keyed frame:  0x01 | generation u8 | slot u16 | addr u64 | rkey u32 | length u64 | CTS

(network byte order). The sender keeps the latest key per (generation, slot) and turns a
write's remote offset (slot * slot_size + byte offset) into (address, rkey).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sdr.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["RemoteKey", "RemoteKeys", "frame", "unframe"]

_PLAIN, _KEYED = 0, 1
_KEY = struct.Struct("!BHQIQ")


@dataclass(frozen=True, slots=True)
class RemoteKey:
    """Where the receive bound to (generation, slot) lives in the peer's memory."""

    generation: int
    slot: int
    addr: int
    rkey: int
    length: int


def frame(data: bytes, key: RemoteKey | None = None) -> bytes:
    """A control datagram: ``data`` with its key (if any) in front."""
    if key is None:
        return bytes([_PLAIN]) + data
    head = _KEY.pack(key.generation, key.slot, key.addr, key.rkey, key.length)
    return bytes([_KEYED]) + head + data


def unframe(datagram: bytes) -> tuple[RemoteKey | None, bytes]:
    """Split a control datagram into (key or None, upper message)."""
    if not datagram:
        raise RemoteProtocolError("empty control datagram")
    kind = datagram[0]
    if kind == _PLAIN:
        return None, datagram[1:]
    if kind == _KEYED and len(datagram) >= 1 + _KEY.size:
        gen, slot, addr, rkey, length = _KEY.unpack_from(datagram, 1)
        return RemoteKey(gen, slot, addr, rkey, length), datagram[1 + _KEY.size :]
    raise RemoteProtocolError(f"bad verbs control frame: kind {kind}, {len(datagram)} bytes")


class RemoteKeys:
    """The sender's view of the receiver's bound entries."""

    def __init__(self, slot_size: int) -> None:
        self.slot_size = slot_size
        self._keys: dict[tuple[int, int], RemoteKey] = {}

    def learn(self, key: RemoteKey) -> None:
        self._keys[(key.generation, key.slot)] = key

    def target(self, generation: int, remote_offset: int, length: int) -> tuple[int, int]:
        """(remote address, rkey) of a write; ProtocolError when no CTS announced it."""
        slot, within = divmod(remote_offset, self.slot_size)
        key = self._keys.get((generation, slot))
        if key is None:
            raise LocalProtocolError(f"no receive key for generation {generation}, slot {slot}")
        if length == 0:  # immediate-only: a zero-length write touches no memory
            return key.addr, key.rkey
        if within + length > key.length:
            raise LocalProtocolError(
                f"write [{within}, {within + length}) past the {key.length}-byte receive "
                f"in generation {generation}, slot {slot}"
            )
        return key.addr + within, key.rkey
