"""The per-packet receive work of one channel, independent of the wire.

For each packet a :class:`ChannelEngine` does what a NIC (or a DPA thread) does for a
write-with-immediate: look the packet up in the shared key table, discard and count it
when it is late, stale, out of range or malformed, otherwise copy the payload into the
registered shared-memory buffer, set the packet's byte, bump the channel's count for its
chunk, and append a completion record to the channel's ring. A packet whose byte is
already set (placed before, or sealed because its chunk was verified) is a duplicate and
is never written: the first copy wins. The rules are those of
:meth:`sdr.key_table.KeyTable.resolve` (the tests check both agree packet by packet).

It runs in a worker process (``progress="offload"``) or inline in the application
(``progress="cpu"``): the same code either way. It is written for plain memoryviews,
not NumPy, because per-packet NumPy scalar access costs more than the work itself.
"""

from __future__ import annotations

import struct

from sdr.backends.offload.shared_state import (
    CTL_WORDS,
    DISCARDS,
    ENTRY_WORDS,
    RECORD_WORDS,
    QPShared,
)
from sdr.backends.offload.wire import HEADER, MAGIC, MALFORMED, VERSION, PacketSource

__all__ = ["ChannelEngine", "drain", "malformed"]

_LATE, _OUT_OF_RANGE, _STALE, _MALFORMED, _DUPLICATE = range(len(DISCARDS))
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
        self._keys = shared.keys
        self._ctl = shared.ctl
        self._rings = shared.rings
        self._counts = shared.counts
        self._packets = shared.packets
        self._discards = shared.discards
        self._disc_base = channel * len(DISCARDS)
        self._head_at = channel * CTL_WORDS
        self._tail_at = channel * CTL_WORDS + 8
        self._ring_bytes = shared.ring_bytes
        self._ring_base = channel * lay.ring_capacity * _RECORD.size
        self._count_base = channel * lay.slots * lay.max_chunks
        self._cap = lay.ring_capacity
        self._lay = lay
        self._generations, self._slots, self._slot_size = lay.generations, lay.slots, lay.slot_size
        self._id_shift, self._user_bits = lay.id_shift, lay.user_bits
        self._offset_mask, self._fragments, self._mtu = lay.offset_mask, lay.fragments, lay.mtu
        self._max_packets, self._max_chunks = lay.max_packets, lay.max_chunks
        self._ppc = lay.packets_per_chunk

    def room(self) -> int:
        """Free records in this channel's completion ring."""
        return self._cap - (self._ctl[self._head_at] - self._ctl[self._tail_at])

    def handle(self, packet: memoryview) -> bool:
        """Process one packet; True when it was accepted (and a record written)."""
        # Hot path: locals only, one branch per rule (this loop is the benchmark).
        n = len(packet)
        if n < _HDR:
            self._discards[self._disc_base + _MALFORMED] += 1
            return False
        magic, version, gen, _, _, imm, remote = _unpack(packet)
        if magic != MAGIC or version != VERSION:
            self._discards[self._disc_base + _MALFORMED] += 1
            return False
        return self.place(gen, imm, remote, packet[_HDR:])

    def place(self, gen: int, imm: int, remote: int, payload: memoryview) -> bool:
        """The receive work for a parsed packet (any wire); True when accepted."""
        length = len(payload)
        if gen >= self._generations:
            self._discards[self._disc_base + _STALE] += 1
            return False
        slot, within = divmod(remote, self._slot_size)
        if slot >= self._slots:
            self._discards[self._disc_base + _OUT_OF_RANGE] += 1
            return False
        keys = self._keys
        base = (gen * self._slots + slot) * ENTRY_WORDS
        while True:  # seqlock read: retry while the application is writing this entry
            seq = keys[base]
            if seq & 1:
                continue
            segment = keys[base + 1]
            offset = keys[base + 2]
            bound = keys[base + 3]
            msg_id = keys[base + 4]
            if keys[base] == seq:
                break
        if segment < 0 or imm >> self._id_shift != msg_id:
            self._discards[self._disc_base + _LATE] += 1
            return False
        pkt = (imm >> self._user_bits) & self._offset_mask
        if length == 0:
            if pkt >= self._fragments:
                self._discards[self._disc_base + _MALFORMED] += 1
                return False
        else:
            mtu = self._mtu
            if within != pkt * mtu or length != (mtu if bound - within > mtu else bound - within):
                reason = _OUT_OF_RANGE if within == pkt * mtu and within + length > bound else None
                self._discards[self._disc_base + (_MALFORMED if reason is None else reason)] += 1
                return False
            memory = self.segments.get(segment)
            if memory is None:
                self._discards[self._disc_base + _MALFORMED] += 1
                return False
            index = slot * self._max_packets + pkt
            packets = self._packets
            if packets[index]:
                self._discards[self._disc_base + _DUPLICATE] += 1
                return False
            start = offset + within
            memory[start : start + length] = payload
            packets[index] = 1
            self._counts[self._count_base + slot * self._max_chunks + pkt // self._ppc] += 1
        ctl = self._ctl
        head = ctl[self._head_at]
        _RECORD.pack_into(
            self._ring_bytes,
            self._ring_base + (head % self._cap) * _RECORD.size,
            self.channel << 8 | gen,
            imm,
            length,
            remote,
        )
        ctl[self._head_at] = head + 1  # publish after the payload and the record
        return True


def malformed(engine: ChannelEngine) -> None:
    """Count a packet a wire decoder rejected (bad checksum, unknown opcode or QPN)."""
    engine._discards[engine._disc_base + _MALFORMED] += 1


def drain(engine: ChannelEngine, source: PacketSource, budget: int) -> int:
    """Feed up to ``budget`` packets from ``source`` to ``engine`` (never past ring room).

    Returns the packets taken. A full ring stops the channel: packets then wait in the
    source (and a socket drops them when its buffer fills), as a NIC drops on overflow.
    """
    limit = min(budget, engine.room())
    recv = source.recv
    taken = 0
    if getattr(source, "decoded", False):  # the source parsed its wire: (gen, imm, remote, payload)
        place = engine.place
        while taken < limit:
            item = recv()
            if item is None:
                break
            if item is MALFORMED:
                malformed(engine)
            else:
                place(*item)
            taken += 1
        return taken
    handle = engine.handle
    while taken < limit:
        packet = recv()
        if packet is None:
            break
        handle(packet)
        taken += 1
    return taken
