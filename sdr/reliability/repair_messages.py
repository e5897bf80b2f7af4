"""What the receiver has and lacks: SACK, NACK and EC_NACK (receiver -> sender).

Types and bodies are in :mod:`sdr.reliability.messages`' table. Each decodes in O(its
bytes) and names chunks in [0, 2^32 - 1); :meth:`RangeMessage.clipped` bounds what one
names to the message it is about before anyone acts on it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from sdr.errors import RemoteProtocolError
from sdr.reliability.geometry import chunk_runs
from sdr.reliability.wire import (
    _CHUNK_END,
    _OVERHEAD,
    ControlMessage,
    _need,
    register_message_type,
)
from sdr.transport import MAX_CONTROL_SIZE

__all__ = ["RangeMessage", "Sack", "Nack", "EcNack"]

_SACK = struct.Struct("!II")
_ACK_DELAY = struct.Struct("!I")  # microseconds, present when flag 2 is set
_RANGE = struct.Struct("!II")
_COUNT = struct.Struct("!H")
_EC = struct.Struct("!HH")

_SACK_MAX_BITS = (MAX_CONTROL_SIZE - _OVERHEAD - _SACK.size - _ACK_DELAY.size) * 8
_NACK_MAX_RANGES = (MAX_CONTROL_SIZE - _OVERHEAD - _COUNT.size) // _RANGE.size

"""Chunk indices a control message can name are [0, _CHUNK_END): a range's end fits u32."""


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The union of the half-open ranges [starts[i], ends[i]) as sorted, disjoint,
    non-adjacent, non-empty (first, count) ranges; O(r log r) for r ranges, vectorized."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return ()
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    head = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    tail = np.concatenate([head[1:] - 1, [len(starts) - 1]])
    firsts, stops = starts[head], reach[tail]
    return tuple(zip(firsts.tolist(), (stops - firsts).tolist(), strict=True))


def _range_union(ranges: tuple[tuple[int, int], ...], limit: int) -> tuple[tuple[int, int], ...]:
    """:func:`_union` of (first, count) ranges of any Python ints, clipped to [0, limit)."""
    if not ranges:
        return ()
    bounds = np.array(
        [(min(max(f, 0), limit), min(max(f + n, 0), limit)) for f, n in ranges], dtype=np.int64
    )
    return _union(bounds[:, 0], bounds[:, 1])


class RangeMessage(ControlMessage):
    """A receiver -> sender message naming chunks; clip it to the message before use."""

    TO_SENDER: ClassVar[bool] = True

    def clipped(self, n_chunks: int) -> RangeMessage:
        """The same message naming only chunks below ``n_chunks``."""
        raise NotImplementedError


@register_message_type
@dataclass(frozen=True, eq=False)
class Sack(RangeMessage):
    """Cumulative ACK (chunks below ``cum`` arrived) plus a selective bitmap after it.

    ``bits[i]`` says whether chunk ``cum + 1 + i`` arrived; chunks past the bitmap are
    unknown. ``digest_ok``: the receiver holds every checksum of the message. The decoded
    bitmap is bounded by the message's bytes, ``cum`` is not: clip before :meth:`acked`.
    ``ack_delay``: seconds from the receiver's latest data arrival to this SACK (QUIC's
    ACK Delay, RFC 9000 section 13.2.5): the sender takes it off the RTT sample its
    congestion controller gets, so coalescing SACKs does not inflate it. On the wire in
    microseconds (flag 2), saturating at 2^32 - 1; absent (0) when the receiver has not
    timed it.
    """

    TYPE: ClassVar[int] = 18
    seq: int
    cum: int
    bits: np.ndarray = field(repr=False)
    digest_ok: bool = True
    ack_delay: float = 0.0

    def _micros(self) -> int:
        return min(max(round(self.ack_delay * 1e6), 0), 0xFFFFFFFF)

    def _flags(self) -> int:
        return (1 if self.digest_ok else 0) | (2 if self._micros() else 0)

    def _body(self) -> bytes:
        packed = np.packbits(self.bits.astype(bool), bitorder="little").tobytes()
        micros = self._micros()
        delay = _ACK_DELAY.pack(micros) if micros else b""
        return _SACK.pack(self.cum, len(self.bits)) + delay + packed

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Sack:
        head = _SACK.size + (_ACK_DELAY.size if flags & 2 else 0)
        _need(body, head, "SACK")
        cum, nbits = _SACK.unpack_from(body)
        if len(body) != head + -(-nbits // 8):
            raise RemoteProtocolError(f"SACK of {nbits} bits has a {len(body)}-byte body")
        delay = _ACK_DELAY.unpack_from(body, _SACK.size)[0] / 1e6 if flags & 2 else 0.0
        raw = np.frombuffer(body, dtype=np.uint8, offset=head)
        bits = np.unpackbits(raw, count=nbits, bitorder="little").astype(bool)
        return cls(seq, cum, bits, bool(flags & 1), delay)

    def clipped(self, n_chunks: int) -> Sack:
        """This SACK limited to a message of ``n_chunks`` chunks (a forged or damaged SACK
        may claim up to 2^32 chunks; expanding that would take gigabytes)."""
        if self.cum + 1 + len(self.bits) <= n_chunks:
            return self
        cum = min(self.cum, n_chunks)
        bits = self.bits[: max(0, n_chunks - cum - 1)]
        return Sack(self.seq, cum, bits, self.digest_ok, self.ack_delay)

    def acked(self) -> np.ndarray:
        """Indices of the chunks this SACK reports as arrived (sorted, distinct; O(cum +
        bits), so :meth:`clipped` first)."""
        head = np.arange(self.cum, dtype=np.int64)
        return np.concatenate([head, self.cum + 1 + np.flatnonzero(self.bits)])

    @classmethod
    def build(cls, seq: int, have: np.ndarray, digest_ok: bool, ack_delay: float = 0.0) -> Sack:
        """The SACK for arrival mask ``have``, with as much bitmap as fits one message."""
        missing = np.flatnonzero(~have)
        cum = int(missing[0]) if len(missing) else len(have)
        tail = have[cum + 1 : cum + 1 + _SACK_MAX_BITS]
        last = np.flatnonzero(tail)
        bits = tail[: int(last[-1]) + 1 if len(last) else 0].copy()
        return cls(seq, cum, bits, digest_ok, ack_delay)


@register_message_type
@dataclass(frozen=True, eq=False)
class Nack(RangeMessage):
    """Chunks the receiver asks to have resent now (holes, or chunks that failed checks).

    ``ranges``: (first, count) pairs. A decoded NACK's ranges are their union: sorted,
    disjoint and non-empty (a range repeated 509 times is one range); one built in memory
    may hold any ranges, and encodes as their union.
    """

    TYPE: ClassVar[int] = 19
    seq: int
    ranges: tuple[tuple[int, int], ...]

    def _body(self) -> bytes:
        ranges = _range_union(self.ranges, _CHUNK_END)
        table = np.array(ranges, dtype=">u4").reshape(len(ranges), 2)
        return _COUNT.pack(len(ranges)) + table.tobytes()

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> Nack:
        _need(body, _COUNT.size, "NACK")
        (count,) = _COUNT.unpack_from(body)
        if len(body) != _COUNT.size + count * _RANGE.size:
            raise RemoteProtocolError(
                f"NACK of {count} ranges must be {_COUNT.size + count * _RANGE.size} body "
                f"bytes, got {len(body)}"
            )
        table = np.frombuffer(body, dtype=">u4", count=2 * count, offset=_COUNT.size)
        table = table.astype(np.int64).reshape(count, 2)
        ends = np.minimum(table[:, 0] + table[:, 1], _CHUNK_END)
        return cls(seq, _union(table[:, 0], ends))

    def clipped(self, n_chunks: int) -> Nack:
        """The union of the ranges limited to chunks below ``n_chunks``: sorted, disjoint,
        covering at most ``n_chunks`` chunks however the ranges repeat or overlap (see
        :meth:`Sack.clipped`); O(r log r) for r ranges."""
        return Nack(self.seq, _range_union(self.ranges, min(max(n_chunks, 0), _CHUNK_END)))

    def covered(self) -> int:
        """How many distinct chunks the ranges cover (without listing them)."""
        return sum(n for _, n in _range_union(self.ranges, _CHUNK_END))

    def chunks(self) -> np.ndarray:
        """The distinct chunk indices the ranges cover, sorted (O(:meth:`covered`), so
        :meth:`clipped` first: a decoded range may name up to 2^32 chunks)."""
        ranges = _range_union(self.ranges, _CHUNK_END)
        if not ranges:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([np.arange(f, f + n, dtype=np.int64) for f, n in ranges])

    @classmethod
    def build(cls, seq: int, chunks: np.ndarray) -> list[Nack]:
        """NACKs covering ``chunks`` (any order, repeats allowed), split to fit control
        messages."""
        runs = chunk_runs(np.unique(np.asarray(chunks, dtype=np.int64)))
        return [
            cls(seq, tuple(runs[i : i + _NACK_MAX_RANGES]))
            for i in range(0, len(runs), _NACK_MAX_RANGES)
        ]


@register_message_type
@dataclass(frozen=True, eq=False)
class EcNack(RangeMessage):
    """Submessages that cannot be decoded, each with the bitmap of its missing data chunks.

    A decoded EC_NACK holds each submessage once (a repeated one ORs its flags), at most
    one per 5 body bytes; submessage indices are not bounded by the message until
    :meth:`clipped`.
    """

    TYPE: ClassVar[int] = 20
    seq: int
    k: int
    missing: dict[int, np.ndarray]
    """submessage index -> bool array of k flags (True: data chunk j is missing)."""
    digest_ok: bool = True
    table: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    """The same as (sorted submessage indices, k-column flag matrix), when the message was
    decoded or clipped: lets clipped() and chunks() run without a loop per entry."""

    def _flags(self) -> int:
        return 1 if self.digest_ok else 0

    def _body(self) -> bytes:
        parts = [_EC.pack(self.k, len(self.missing))]
        for sub, flags in sorted(self.missing.items()):
            mask = np.zeros(self.k, dtype=bool)
            mask[: len(flags)] = flags[: self.k]
            parts.append(struct.pack("!I", sub) + np.packbits(mask, bitorder="little").tobytes())
        return b"".join(parts)

    @classmethod
    def _parse(cls, seq: int, flags: int, body: memoryview) -> EcNack:
        _need(body, _EC.size, "EC_NACK")
        k, count = _EC.unpack_from(body)
        entry = 4 + -(-k // 8)
        if k < 1 or len(body) != _EC.size + count * entry:
            raise RemoteProtocolError(
                f"EC_NACK of {count} submessages (k={k}) must be {_EC.size + count * entry} "
                f"body bytes with k >= 1, got {len(body)}"
            )
        if not count:
            return cls(seq, k, {}, bool(flags & 1))
        table = np.frombuffer(body, dtype=np.uint8, count=count * entry, offset=_EC.size)
        table = table.reshape(count, entry)
        subs = np.ascontiguousarray(table[:, :4]).view(">u4").ravel().astype(np.int64)
        bits = np.unpackbits(table[:, 4:], axis=1, count=k, bitorder="little").astype(bool)
        order = np.argsort(subs, kind="stable")
        subs, bits = subs[order], bits[order]
        head = np.flatnonzero(np.concatenate([[True], subs[1:] != subs[:-1]]))
        merged = np.logical_or.reduceat(bits, head, axis=0)
        subs = subs[head]
        missing = dict(zip(subs.tolist(), merged, strict=True))
        return cls(seq, k, missing, bool(flags & 1), (subs, merged))

    def _matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted submessage indices, their k flags as one bool matrix)."""
        if self.table is not None:
            return self.table
        subs = np.array(sorted(self.missing), dtype=np.int64)
        flags = np.zeros((len(subs), self.k), dtype=bool)
        for row, sub in enumerate(subs.tolist()):
            f = self.missing[sub][: self.k]
            flags[row, : len(f)] = f
        return subs, flags

    def clipped(self, n_chunks: int) -> EcNack:
        """This EC_NACK limited to the submessages and chunks of a message of ``n_chunks``
        data chunks (flags past the message cleared); O(entries * k), vectorized."""
        k, n_chunks = self.k, max(n_chunks, 0)
        subs, flags = self._matrix()
        keep = (subs >= 0) & (subs * k < n_chunks)
        subs, flags = subs[keep], flags[keep]
        flags = flags & (subs[:, None] * k + np.arange(k) < n_chunks)
        missing = dict(zip(subs.tolist(), flags, strict=True))
        return EcNack(self.seq, k, missing, self.digest_ok, (subs, flags))

    def chunks(self) -> np.ndarray:
        """Global data chunk indices the NACK asks for (submessage s covers s*k .. s*k+k-1),
        sorted and distinct; at most k per submessage entry."""
        subs, flags = self._matrix()
        rows, cols = np.nonzero(flags)
        return (subs[rows] * self.k + cols).astype(np.int64)

    @classmethod
    def build(
        cls, seq: int, k: int, missing: dict[int, np.ndarray], digest_ok: bool = True
    ) -> list[EcNack]:
        """EC_NACKs for these failed submessages, split to fit control messages."""
        per = (MAX_CONTROL_SIZE - _OVERHEAD - _EC.size) // (4 + -(-k // 8))
        items = sorted(missing.items())
        return [cls(seq, k, dict(items[i : i + per]), digest_ok) for i in range(0, len(items), per)]
