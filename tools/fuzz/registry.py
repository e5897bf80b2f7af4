"""The registry of fuzz targets, and a small reader that turns fuzz bytes into values.

A target takes raw bytes and must either accept them or raise the errors its API
documents (an ``sdr.SDRError``, or ``ValueError`` where documented); anything else is a
crash. The same targets run under atheris (``tools/fuzz/run.py``, millions of inputs)
and, briefly, in the test suite (tests/test_fuzz_targets.py).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["TARGETS", "target", "Reader"]

TARGETS: dict[str, Callable[[bytes], None]] = {}


def target(name: str) -> Callable[[Callable[[bytes], None]], Callable[[bytes], None]]:
    """Register a fuzz target under ``name``."""

    def wrap(fn: Callable[[bytes], None]) -> Callable[[bytes], None]:
        TARGETS[name] = fn
        return fn

    return wrap


class Reader:
    """Consumes fuzz bytes front to back; reads past the end give zeros (never raise)."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def empty(self) -> bool:
        """All bytes consumed."""
        return self.pos >= len(self.data)

    def take(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer at the end of the input)."""
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    def _int(self, n: int) -> int:
        return int.from_bytes(self.take(n).ljust(n, b"\0"), "little")

    def u8(self) -> int:
        return self._int(1)

    def u16(self) -> int:
        return self._int(2)

    def u32(self) -> int:
        return self._int(4)

    def u64(self) -> int:
        return self._int(8)

    def rest(self) -> bytes:
        """Everything not consumed yet."""
        return self.take(len(self.data))
