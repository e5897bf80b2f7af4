"""A file as reliable messages: mapped in memory, cut into pieces, counted as verified.

Both sides map the file (the receiver writes into its mapping, zero copy), move it as
messages of ``message_size`` bytes and count only the bytes of messages that completed
and were verified.
"""

from __future__ import annotations

import hashlib
import mmap
from typing import Any

from sdr.errors import SDRError
from sdr.units import format_size

__all__ = ["arrived", "map_file", "pieces", "sha256", "stats", "verified", "with_arrived"]


def pieces(size: int, message: int) -> list[tuple[int, int]]:
    return [(off, min(message, size - off)) for off in range(0, size, message)]


def map_file(path: str, size: int, write: bool) -> tuple[Any, Any]:
    fh = open(path, "r+b" if write else "rb")  # noqa: SIM115 - closed by the caller
    if write:
        fh.truncate(size)
    if size == 0:
        return fh, bytearray(0)
    access = mmap.ACCESS_WRITE if write else mmap.ACCESS_COPY  # COPY: writable, never saved
    return fh, mmap.mmap(fh.fileno(), size, access=access)


def sha256(buffer: Any) -> str:
    return hashlib.sha256(memoryview(buffer)).hexdigest()


def stats(handles: list[Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for handle in handles:
        for key, value in handle.stats.items():
            total[key] = total.get(key, 0) + value
    return total


def verified(handles: list[Any]) -> int:
    """Bytes of the messages that completed and were verified (never failed ones)."""
    return sum(h.length for h in handles if h.done)


def arrived(handles: list[Any], size: int) -> str:
    return f"{format_size(verified(handles))} of {format_size(size)} verified"


def with_arrived(exc: SDRError, handles: list[Any], size: int) -> SDRError:
    """``exc`` again (same type), its message saying how much of the file was verified."""
    return type(exc)(f"{exc} ({arrived(handles, size)})")
