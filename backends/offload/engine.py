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
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from sdr.backends.offload.shared_state import CTL_WORDS, DISCARDS, RECORD_WORDS, QPShared
from sdr.backends.offload.wire import HEADER, MAGIC, MALFORMED, VERSION, PacketSource
from sdr.placement import PLACED, int64_column, place_batch

__all__ = ["ChannelEngine", "drain", "malformed"]

_MALFORMED = DISCARDS.index("malformed")
_HDR = HEADER.size
_unpack = HEADER.unpack_from
_RECORD = struct.Struct(f"={RECORD_WORDS}q")  # one completion record, native int64 words


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
    recv = source.recv
    decoded = getattr(source, "decoded", False)  # items are (gen, imm, remote, payload)
    taken = 0
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
