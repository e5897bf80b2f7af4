"""How a message of ``length`` bytes is cut into chunks (and EC submessages)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MessageGeometry", "chunk_runs"]


@dataclass(frozen=True)
class MessageGeometry:
    """Chunks of one message: chunk ``c`` is bytes [c*chunk_size, min((c+1)*chunk_size, length))."""

    length: int
    chunk_size: int

    @property
    def n_chunks(self) -> int:
        return -(-self.length // self.chunk_size)

    def bounds(self, chunk: int) -> tuple[int, int]:
        """Byte range [start, stop) of one chunk."""
        start = chunk * self.chunk_size
        return start, min(start + self.chunk_size, self.length)

    def chunk_bytes(self, chunks: np.ndarray) -> int:
        """Bytes in the distinct chunks ``chunks`` (the last chunk may be short)."""
        n = len(chunks)
        if n and self.length % self.chunk_size and (np.asarray(chunks) == self.n_chunks - 1).any():
            return (n - 1) * self.chunk_size + self.length % self.chunk_size
        return n * self.chunk_size

    def submessages(self, k: int) -> int:
        """Submessages of ``k`` data chunks (the last one may hold fewer)."""
        return -(-self.n_chunks // k)


def chunk_runs(chunks: np.ndarray) -> list[tuple[int, int]]:
    """Sorted, distinct chunk indices as (first, count) runs of consecutive indices."""
    chunks = np.asarray(chunks, dtype=np.int64)
    if not len(chunks):
        return []
    breaks = np.flatnonzero(np.diff(chunks) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(chunks)]])
    return [(int(chunks[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]
