"""Per-packet arrival state coalesced into the chunk bitmap users poll.

One bit per chunk (chunk = N x MTU): a chunk's bit is set once every one of its packets
has arrived. The state lives in small NumPy arrays sized by the posted receive (not by
the QP's limits), so an idle QP costs nothing and a 64 MiB receive at a 4 KiB MTU costs
about 20 KiB; 128 KiB more where the driver gives each packet's checksum (kept per
packet, so that a chunk's can be combined from them: :meth:`ReceiveBitmap.chunk_sums`).
"""

from __future__ import annotations

import numpy as np

from sdr import placement
from sdr.crc import crc32_combine
from sdr.errors import ConfigError

__all__ = ["ReceiveBitmap", "bitmap_chunk_expand"]


class ReceiveBitmap:
    """Arrival state of one posted receive of ``length`` bytes."""

    __slots__ = (
        "length", "mtu", "chunk_size", "packets", "chunks", "sums", "_counts", "_expected"
    )  # fmt: skip

    def __init__(self, length: int, mtu: int, chunk_size: int) -> None:
        if length < 0 or mtu < 1 or chunk_size < mtu or chunk_size % mtu:
            raise ConfigError(
                f"bad bitmap geometry: length={length}, mtu={mtu}, chunk_size={chunk_size}"
            )
        self.length = length
        self.mtu = mtu
        self.chunk_size = chunk_size
        n_packets = -(-length // mtu)
        per_chunk = chunk_size // mtu
        n_chunks = -(-n_packets // per_chunk)
        self.packets = np.zeros(n_packets, dtype=bool)
        self.chunks = np.zeros(n_chunks, dtype=bool)
        self.sums: np.ndarray | None = None
        """zlib's CRC-32 of each packet's payload as it was placed (int64, -1: not known),
        from the first batch that carries them (:meth:`keep_sums`); None before."""
        self._counts = np.zeros(n_chunks, dtype=np.uint32)
        self._expected = np.full(n_chunks, per_chunk, dtype=np.uint32)
        if n_chunks:
            self._expected[-1] = n_packets - (n_chunks - 1) * per_chunk

    @property
    def n_packets(self) -> int:
        return len(self.packets)

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)

    @property
    def complete(self) -> bool:
        """True when every packet has arrived (a zero-length receive is complete at once)."""
        return bool(self.chunks.all())

    def expected_lengths(self, packet_offsets: np.ndarray) -> np.ndarray:
        """Payload bytes the packets at these offsets must carry (the last may be short)."""
        starts = packet_offsets.astype(np.int64) * self.mtu
        return np.minimum(self.mtu, self.length - starts)

    def keep_sums(self) -> np.ndarray:
        """Start keeping the packets' checksums (arrivals marked before stay unknown)."""
        if self.sums is None:
            self.sums = np.full(self.n_packets, -1, dtype=np.int64)
        return self.sums

    def mark(
        self, packet_offsets: np.ndarray, crcs: np.ndarray | None = None
    ) -> tuple[int, int, np.ndarray]:
        """Record arrivals. Offsets must be < n_packets (the caller filters). ``crcs``:
        each row's payload checksum, kept for the first copy of a packet when
        :attr:`sums` is kept.

        Returns (new packets, duplicates, indices of chunks that just became complete).
        """
        offsets = packet_offsets.astype(np.int64, copy=False)
        unique, first = np.unique(offsets, return_index=True)
        new = ~self.packets[unique]
        fresh = unique[new]
        duplicates = len(offsets) - len(fresh)
        if not len(fresh):
            return 0, duplicates, np.empty(0, dtype=np.int64)
        self.packets[fresh] = True
        if crcs is not None and self.sums is not None:
            self.sums[fresh] = crcs[first[new]]
        chunk_ids, counts = np.unique(fresh // (self.chunk_size // self.mtu), return_counts=True)
        self._counts[chunk_ids] += counts.astype(np.uint32)
        done = chunk_ids[self._counts[chunk_ids] == self._expected[chunk_ids]]
        self.chunks[done] = True
        return len(fresh), duplicates, done

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(packets, counts, expected, chunks): the arrays a native marking pass updates
        in place (``sdr._placement.mark_arrivals``), by the rules of :meth:`mark`."""
        return self.packets, self._counts, self._expected, self.chunks

    def mark_one(self, packet: int, crc: int = -1) -> bool:
        """Record one arrival (offset < n_packets) and its payload's checksum (-1: not
        known) where :attr:`sums` is kept; False when it is a duplicate."""
        if self.packets[packet]:
            return False
        self.packets[packet] = True
        if self.sums is not None:
            self.sums[packet] = crc
        chunk = packet // (self.chunk_size // self.mtu)
        self._counts[chunk] += 1
        if self._counts[chunk] == self._expected[chunk]:
            self.chunks[chunk] = True
        return True

    def packet_range(self, chunks: np.ndarray) -> list[tuple[int, int]]:
        """Packet index ranges [start, stop) of these chunks (valid indices only)."""
        per_chunk = self.chunk_size // self.mtu
        out = []
        for c in np.unique(np.asarray(chunks, dtype=np.int64)).tolist():
            if 0 <= c < self.n_chunks:
                out.append((c * per_chunk, min((c + 1) * per_chunk, self.n_packets)))
        return out

    def packet_runs(self, chunks: np.ndarray) -> list[tuple[int, int]]:
        """Packet index ranges [start, stop) of these chunks (valid indices only), one per
        run of consecutive chunks: what :meth:`packet_range` covers, in fewer ranges.
        (A plain loop: a round's dozen chunks cost less so than NumPy's fixed costs.)"""
        runs: list[list[int]] = []
        for c in sorted(set(np.asarray(chunks, dtype=np.int64).tolist())):
            if not 0 <= c < self.n_chunks:
                continue
            if runs and runs[-1][1] == c:
                runs[-1][1] = c + 1
            else:
                runs.append([c, c + 1])
        per_chunk = self.chunk_size // self.mtu
        return [(a * per_chunk, min(b * per_chunk, self.n_packets)) for a, b in runs]

    def clear(self, chunks: np.ndarray) -> None:
        """Forget the arrival of these chunks' packets (they failed a check): their bits
        and counts go back to zero, so the repair's packets count as new arrivals."""
        for start, stop in self.packet_range(chunks):
            self.packets[start:stop] = False
            if self.sums is not None:
                self.sums[start:stop] = -1
            chunk = start // (self.chunk_size // self.mtu)
            self._counts[chunk] = 0
            self.chunks[chunk] = False

    def chunk_sums(self, chunks: np.ndarray) -> np.ndarray:
        """zlib's CRC-32 of each of ``chunks`` combined from its packets' checksums
        (int64), -1 for a chunk with a packet whose checksum is not known (or not
        arrived): those must be read. One native call where the native datapath runs
        (``sdr._placement.chunk_sums``), else :func:`sdr.crc.crc32_combine` per packet,
        the reference (tests hold the two equal)."""
        chunks = np.ascontiguousarray(chunks, dtype=np.int64)
        out = np.full(len(chunks), -1, dtype=np.int64)
        sums = self.sums
        if sums is None or not len(chunks):
            return out
        per_chunk = self.chunk_size // self.mtu
        if placement.DATAPATH == "native" and placement.chunk_sums_native is not None:
            placement.chunk_sums_native(sums, per_chunk, self.mtu, self.length, chunks, out)
            return out
        for i, chunk in enumerate(chunks.tolist()):
            start = chunk * per_chunk
            parts = sums[start : min(start + per_chunk, self.n_packets)].tolist()
            if not parts or min(parts) < 0 or max(parts) > 0xFFFFFFFF:
                continue  # one not known (or not a CRC-32): read the chunk
            crc = parts[0]
            for packet, part in enumerate(parts[1:], start=start + 1):
                crc = crc32_combine(crc, part, min(self.mtu, self.length - packet * self.mtu))
            out[i] = crc
        return out

    def view(self) -> np.ndarray:
        """Read-only view of the chunk bitmap (one bool per chunk)."""
        view = self.chunks.view()
        view.flags.writeable = False
        return view

    def missing_chunks(self) -> np.ndarray:
        """Indices of chunks not yet complete."""
        return np.flatnonzero(~self.chunks)

    def nbytes(self) -> int:
        """Memory held by this bitmap's arrays."""
        kept = 0 if self.sums is None else self.sums.nbytes
        return (
            self.packets.nbytes + self.chunks.nbytes + self._counts.nbytes + self._expected.nbytes
            + kept
        )  # fmt: skip


def bitmap_chunk_expand(chunks: object, chunk_size: int, length: int) -> np.ndarray:
    """Byte ranges of chunks: an (n, 2) int64 array of [start, stop) offsets.

    The C API's bitmap_chunk_expand. ``chunks`` is an index, a sequence of indices or a
    boolean mask (e.g. a chunk bitmap); the last chunk is clipped to ``length``.
    """
    index = np.asarray(chunks)
    if index.dtype == bool:
        index = np.flatnonzero(index)
    index = np.atleast_1d(index).astype(np.int64)
    n_chunks = -(-length // chunk_size) if chunk_size > 0 else 0
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    if len(index) and (index.min() < 0 or index.max() >= n_chunks):
        raise ConfigError(
            f"chunk index out of range: valid 0..{n_chunks - 1} for {length} bytes in "
            f"{chunk_size}-byte chunks, got {index.min()}..{index.max()}"
        )
    starts = index * chunk_size
    return np.stack([starts, np.minimum(starts + chunk_size, length)], axis=1)
