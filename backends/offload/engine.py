"""The receive work of one channel, independent of the wire.

A :class:`ChannelEngine` does what a NIC (or a DPA thread) does for writes-with-immediate,
a batch at a time: it runs the core's software-NIC step (:func:`sdr.placement.place_batch`)
over the QP's shared key table, packet bytes and this channel's chunk counts and discard
counters, so a packet that is late, stale, out of range or malformed is counted and never
written, and a packet whose byte is already set (placed before, or sealed because its
chunk was verified) is a duplicate and is never written: the first copy wins. For each
placed packet it then appends a completion record to the channel's ring.

It runs in a worker process (``progress="offload"``) or inline in the application
(``progress="cpu"``): the same code either way.

Two ways through, chosen by the datapath switch (:func:`sdr.placement.use_datapath`,
``SDR_DATAPATH``): with ``native``, :func:`drain` takes whole staged batches from a
source that has ``recv_staged`` and :meth:`ChannelEngine.handle_staged` parses their
headers and writes their records with array operations, so no Python code runs per
packet; with ``python``, the reference, each packet is taken, parsed and recorded one by
one (:meth:`ChannelEngine.handle_many`). Both give the same verdicts, counters, records
and memory (tests/test_offload_staged.py).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from sdr import placement
from sdr.backends.offload.shared_state import CTL_WORDS, DISCARDS, RECORD_WORDS, QPShared
from sdr.backends.offload.wire import HEADER, MAGIC, MALFORMED, VERSION, PacketSource
from sdr.placement import PLACED, int64_column, place_batch

__all__ = ["HEADER_DTYPE", "ChannelEngine", "drain", "malformed", "staged"]

_MALFORMED = DISCARDS.index("malformed")
_HDR = HEADER.size
_unpack = HEADER.unpack_from
_RECORD = struct.Struct(f"={RECORD_WORDS}q")  # one completion record, native int64 words
HEADER_DTYPE = np.dtype(
    [
        ("magic", ">u2"),
        ("version", "u1"),
        ("generation", "u1"),
        ("channel", ">u2"),
        ("reserved", ">u2"),
        ("imm", ">u4"),
        ("remote", ">u8"),
    ]
)
"""The wire header (:data:`sdr.backends.offload.wire.HEADER`) as a NumPy record."""
assert HEADER_DTYPE.itemsize == _HDR
_HEADER_COLUMNS = np.arange(_HDR, dtype=np.int64)


def staged() -> bool:
    """True when :func:`drain` takes staged batches (the datapath switch says native)."""
    return placement.DATAPATH == "native"


class ChannelEngine:
    """Receive processing for one (QP, channel); the single writer of that channel's state."""

    def __init__(self, shared: QPShared, channel: int, segments: dict[int, memoryview]) -> None:
        lay = shared.layout
        self.shared = shared
        self.channel = channel
        self.segments = segments
        self._ctl = shared.ctl
        self._discards = shared.discards
        self._disc_base = channel * len(DISCARDS)
        self._head_at = channel * CTL_WORDS
        self._tail_at = channel * CTL_WORDS + 8
        self._ring_bytes = shared.ring_bytes
        self._ring_base = channel * lay.ring_capacity * _RECORD.size
        self._cap = lay.ring_capacity

    def room(self) -> int:
        """Free records in this channel's completion ring."""
        return self._cap - (self._ctl[self._head_at] - self._ctl[self._tail_at])

    def handle(self, packet: memoryview) -> bool:
        """Process one packet; True when it was accepted (and a record written)."""
        return self.handle_many([packet]) == 1

    def place(self, gen: int, imm: int, remote: int, payload: memoryview) -> bool:
        """The receive work for one parsed packet (any wire); True when accepted."""
        return self.place_many([(gen, imm, remote, payload)]) == 1

    def handle_many(self, packets: list[memoryview]) -> int:
        """Parse this backend's header off each packet, then :meth:`place_many`."""
        items = []
        for packet in packets:
            if len(packet) < _HDR:
                self._discards[self._disc_base + _MALFORMED] += 1
                continue
            magic, version, gen, _, _, imm, remote = _unpack(packet)
            if magic != MAGIC or version != VERSION:
                self._discards[self._disc_base + _MALFORMED] += 1
                continue
            items.append((gen, imm, remote, packet[_HDR:]))
        return self.place_many(items)

    def handle_staged(self, staging: Any, offsets: np.ndarray, lengths: np.ndarray) -> int:
        """:meth:`handle_many` over packets in one buffer: packet i is
        ``staging[offsets[i] : offsets[i] + lengths[i]]`` (uint8 array or byte buffer;
        int64 offsets and lengths). Headers are parsed as arrays, payloads placed in place."""
        if len(offsets) == 0:
            return 0
        buf = np.frombuffer(staging, dtype=np.uint8)
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        rows = np.flatnonzero(lengths >= _HDR)
        hdr = buf[offsets[rows, None] + _HEADER_COLUMNS].view(HEADER_DTYPE)[:, 0]
        good = (hdr["magic"] == MAGIC) & (hdr["version"] == VERSION)
        bad = len(offsets) - int(np.count_nonzero(good))
        if bad:
            self._discards[self._disc_base + _MALFORMED] += bad
            rows, hdr = rows[good], hdr[good]
        remote = hdr["remote"].astype(np.int64)  # >= 2**63 wraps negative: refused, as -1 is
        remote[remote < 0] = -1
        return self.place_staged(
            buf, hdr["generation"].astype(np.int64), hdr["imm"].astype(np.uint32), remote,
            offsets[rows] + _HDR, lengths[rows] - _HDR,
        )  # fmt: skip

    def place_staged(
        self,
        staging: Any,
        generations: np.ndarray,
        imms: np.ndarray,
        remotes: np.ndarray,
        payload_offsets: np.ndarray,
        lengths: np.ndarray,
    ) -> int:
        """:meth:`place_many` over parsed columns (int64 generations, remote offsets,
        payload offsets and lengths; uint32 immediates) whose payloads lie in ``staging``.
        At most :meth:`room` packets; returns how many were accepted (records written)."""
        if len(lengths) == 0:
            return 0
        table = self.shared.placement_table(self.channel, self.segments)
        verdicts = place_batch(table, generations, remotes, imms, lengths, staging,
                               payload_offsets)  # fmt: skip
        del table  # no view of the shared state outlives the call
        rows = np.flatnonzero(verdicts == PLACED)
        n = len(rows)
        if n == 0:
            return 0
        records = np.empty((n, RECORD_WORDS), dtype=np.int64)
        records[:, 0] = generations[rows] | (self.channel << 8)
        records[:, 1] = imms[rows]
        records[:, 2] = lengths[rows]
        records[:, 3] = remotes[rows]
        head, cap = self._ctl[self._head_at], self._cap
        start = head % cap
        first = min(n, cap - start)
        ring = np.frombuffer(self.shared.rings, dtype=np.int64)
        ring = ring[self._ring_base // 8 : self._ring_base // 8 + cap * RECORD_WORDS]
        ring = ring.reshape(cap, RECORD_WORDS)
        ring[start : start + first] = records[:first]
        ring[: n - first] = records[first:]
        del ring
        self._ctl[self._head_at] = head + n  # publish after the payload and the records
        return n

    def place_many(self, items: list[tuple[int, int, int, Any]]) -> int:
        """Place parsed packets ``(generation, imm, remote_offset, payload)`` in order (at
        most :meth:`room` of them); returns how many were accepted (records written)."""
        if not items:
            return 0
        gens, imms, remotes, payloads = zip(*items, strict=True)
        gen = int64_column(gens)
        remote = int64_column(remotes)
        imm = np.array(imms, dtype=np.uint32)
        lengths = np.array([len(p) for p in payloads], dtype=np.int64)
        table = self.shared.placement_table(self.channel, self.segments)
        verdicts = place_batch(table, gen, remote, imm, lengths, payloads)
        del table  # no view of the shared state outlives the call
        rows = np.flatnonzero(verdicts == PLACED).tolist()
        ctl, cap, size, base = self._ctl, self._cap, _RECORD.size, self._ring_base
        head, ring, pack, chan = (
            ctl[self._head_at],
            self._ring_bytes,
            _RECORD.pack_into,
            self.channel,
        )
        for i, row in enumerate(rows):
            pack(ring, base + ((head + i) % cap) * size, chan << 8 | gens[row], imms[row],
                 int(lengths[row]), remotes[row])  # fmt: skip
        ctl[self._head_at] = head + len(rows)  # publish after the payload and the records
        return len(rows)


def malformed(engine: ChannelEngine) -> None:
    """Count a packet a wire decoder rejected (bad checksum, unknown opcode or QPN)."""
    engine._discards[engine._disc_base + _MALFORMED] += 1


def drain(engine: ChannelEngine, source: PacketSource, budget: int) -> int:
    """Feed up to ``budget`` packets from ``source`` to ``engine`` (never past ring room).

    Returns the packets taken. Packets are placed in batches of at most the source's
    ``staging_slots`` (its views stay valid that long). A full ring stops the channel:
    packets then wait in the source (and a socket drops them when its buffer fills), as
    a NIC drops on overflow.
    """
    limit = min(budget, engine.room())
    step = max(1, getattr(source, "staging_slots", limit))
    decoded = getattr(source, "decoded", False)  # items are (gen, imm, remote, payload)
    taken = 0
    recv_staged = getattr(source, "recv_staged", None)
    if recv_staged is not None and staged():
        while taken < limit:
            want = min(step, limit - taken)
            got, staged_batch = recv_staged(want)  # valid until the next call
            if decoded:
                bad, columns = staged_batch
                if bad:
                    engine._discards[engine._disc_base + _MALFORMED] += bad
                engine.place_staged(*columns)
            else:
                engine.handle_staged(*staged_batch)
            taken += got
            if got < want:
                break
        return taken
    recv = source.recv
    while taken < limit:
        batch: list[Any] = []
        want, got, item = min(step, limit - taken), 0, None
        while got < want:
            item = recv()
            if item is None:
                break
            got += 1
            if item is MALFORMED:
                malformed(engine)
            else:
                batch.append(item)
        if decoded:
            engine.place_many(batch)
        else:
            engine.handle_many(batch)
        taken += got
        if item is None:
            break
    return taken
