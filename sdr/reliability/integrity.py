"""End-to-end integrity: per-chunk CRC-32s carried on the control path (DIGEST messages).

The sender computes one CRC-32 per data chunk (sdr.crc: ISA-L's, ~23 GB/s on one core,
or zlib's, ~4 GB/s) in small steps that overlap sending, and sends them with the message
length and a fingerprint of the scheme. The receiver checks every chunk (arrived or
decoded) against its checksum as it lands, seals it when it matches (the driver refuses
every later packet for it) and reopens it for a repair when it does not; a chunk that
fails is re-requested on its own, so one bad chunk never fails the whole message. A
chunk whose packets a driver checksummed as it placed them (the UDP driver, from the
same read as the ICRC) is checked from those checksums, combined, instead of being read
again. At the moment the message would be declared final, every chunk is read and
checked once more (defence in depth: a driver whose NIC
writes payload itself cannot refuse a late write).
"""

from __future__ import annotations

import zlib

import numpy as np

from sdr import placement
from sdr.crc import crc32
from sdr.errors import RemoteProtocolError
from sdr.reliability.geometry import MessageGeometry
from sdr.reliability.messages import DIGEST_PER_MESSAGE, Digest

__all__ = ["chunk_crc", "chunk_crcs", "fingerprint", "DigestBuilder", "DigestStore"]


def chunk_crc(data: memoryview, geometry: MessageGeometry, chunk: int) -> int:
    """CRC-32 of one chunk of ``data``."""
    start, stop = geometry.bounds(chunk)
    return crc32(data[start:stop])


def chunk_crcs(data: memoryview, geometry: MessageGeometry, chunks: np.ndarray) -> np.ndarray:
    """CRC-32 of each of ``chunks`` of ``data`` (uint32): one native call where the
    native datapath runs (``sdr._placement.chunk_crcs``, the GIL released), else
    :func:`chunk_crc` per chunk, the reference (tests hold the two equal)."""
    chunks = np.ascontiguousarray(chunks, dtype=np.int64)
    out = np.empty(len(chunks), dtype=np.uint32)
    if placement.DATAPATH == "native" and placement.chunk_crcs_native is not None:
        placement.chunk_crcs_native(data, geometry.chunk_size, geometry.length, chunks, out)
    else:
        for i, chunk in enumerate(chunks.tolist()):
            out[i] = chunk_crc(data, geometry, chunk)
    return out


def fingerprint(description: str) -> int:
    """A 32-bit fingerprint of a scheme description (both ends must agree on it)."""
    return zlib.crc32(description.encode())


class DigestBuilder:
    """Sender side: computes the chunk checksums step by step and cuts them into DIGESTs."""

    def __init__(self, seq: int, data: memoryview, geometry: MessageGeometry, scheme: int) -> None:
        self.seq = seq
        self.data = data
        self.geometry = geometry
        self.scheme = scheme
        self.crcs = np.zeros(geometry.n_chunks, dtype=np.uint32)
        self._next = 0
        self.pieces = max(1, -(-geometry.n_chunks // DIGEST_PER_MESSAGE))
        self._ready: list[Digest] = []
        self._early: Digest | None = None
        self.announce = False
        """Also send, once, a DIGEST of the first chunks checksummed, before the first whole
        piece is ready: its fingerprint names the scheme, and an adaptive receiver holds
        every chunk, and acknowledges none, until it knows the scheme. A whole piece covers
        DIGEST_PER_MESSAGE (1014) chunks, 32 MiB of 32 KiB chunks: 0.27 s at 1 Gbit/s,
        past the sender's first RTO (75 ms on a 25 ms link), which then resent a few
        hundred chunks for nothing."""

    @property
    def done(self) -> bool:
        return len(self._ready) == self.pieces

    @property
    def computed(self) -> int:
        """Chunks checksummed so far (in order)."""
        return self._next

    def step(self, max_chunks: int) -> list[Digest]:
        """Checksum up to ``max_chunks`` more chunks; returns the DIGESTs that became ready."""
        n = self.geometry.n_chunks
        stop = min(n, self._next + max_chunks)
        if stop > self._next:
            chunks = np.arange(self._next, stop, dtype=np.int64)
            self.crcs[self._next : stop] = chunk_crcs(self.data, self.geometry, chunks)
        self._next = stop
        fresh = []
        while len(self._ready) < self.pieces:
            first = len(self._ready) * DIGEST_PER_MESSAGE
            last = min(n, first + DIGEST_PER_MESSAGE)
            if last > self._next:
                break
            piece = Digest(
                self.seq,
                self.geometry.length,
                self.scheme,
                self.geometry.chunk_size,
                first,
                self.crcs[first:last].copy(),
            )
            self._ready.append(piece)
            fresh.append(piece)
        if self.announce and self._next and not fresh and not self._ready:
            self.announce = False
            crcs = self.crcs[: self._next].copy()
            g = self.geometry
            self._early = Digest(self.seq, g.length, self.scheme, g.chunk_size, 0, crcs)
            fresh.append(self._early)
        return fresh

    def ready(self) -> list[Digest]:
        """Every DIGEST built so far (for a resend): the announcement until a whole piece."""
        if not self._ready and self._early is not None:
            return [self._early]
        return list(self._ready)


class DigestStore:
    """Receiver side: the checksums received so far, and chunk verification against them."""

    def __init__(self, geometry: MessageGeometry, scheme: int, description: str) -> None:
        self.geometry = geometry
        self.scheme = scheme
        self.description = description
        self.crcs = np.zeros(geometry.n_chunks, dtype=np.uint32)
        self.known = np.zeros(geometry.n_chunks, dtype=bool)
        self.conflicts = 0
        """DIGEST entries that disagreed with a checksum already known (ignored)."""
        self._any = False

    @property
    def complete(self) -> bool:
        """Every chunk's checksum (and the message length) is known."""
        return self._any and bool(self.known.all())

    def add(self, msg: Digest) -> np.ndarray:
        """Take one DIGEST; returns the chunks whose checksum became known.

        ProtocolError when the peer's length, scheme or chunk size differ from ours.
        """
        g = self.geometry
        if msg.scheme != self.scheme:
            raise RemoteProtocolError(
                f"message seq {msg.seq}: the peer's reliability scheme differs (fingerprint "
                f"{msg.scheme:#010x}, ours {self.scheme:#010x} for {self.description}); "
                "configure both ends with the same scheme, k, m and chunk size"
            )
        if msg.length != g.length or msg.chunk_size != g.chunk_size:
            raise RemoteProtocolError(
                f"message seq {msg.seq}: the sender wrote {msg.length} bytes in "
                f"{msg.chunk_size}-byte chunks, but the posted receive is {g.length} bytes in "
                f"{g.chunk_size}-byte chunks; write exactly the posted length"
            )
        stop = msg.first + len(msg.crcs)
        if stop > g.n_chunks:
            raise RemoteProtocolError(
                f"message seq {msg.seq}: DIGEST covers chunks up to {stop}, message has "
                f"{g.n_chunks}"
            )
        self._any = True
        known = self.known[msg.first : stop]
        crcs = np.asarray(msg.crcs, dtype=np.uint32)
        # the first checksum of a chunk wins: a late or forged DIGEST cannot move the
        # target of a chunk that was already checked against it
        self.conflicts += int((known & (self.crcs[msg.first : stop] != crcs)).sum())
        fresh = msg.first + np.flatnonzero(~known)
        self.crcs[fresh] = crcs[fresh - msg.first]
        self.known[fresh] = True
        return fresh

    def check(
        self, data: memoryview, chunks: np.ndarray, sums: np.ndarray | None = None
    ) -> np.ndarray:
        """Whether each of ``chunks`` (all with known checksums) matches its checksum.
        ``sums``: each chunk's CRC-32 as its packets were placed (int64, -1: not known),
        combined from the driver's per-packet checksums; the chunks without one are
        read from ``data``."""
        want = self.crcs[chunks]
        if sums is None:
            return chunk_crcs(data, self.geometry, chunks) == want
        ok = sums == want
        unknown = sums < 0
        if unknown.any():
            ok[unknown] = chunk_crcs(data, self.geometry, chunks[unknown]) == want[unknown]
        return ok
