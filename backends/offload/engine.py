"""The per-packet receive work of one channel, independent of the wire.

For each packet a :class:`ChannelEngine` does what a NIC (or a DPA thread) does for a
write-with-immediate: look the packet up in the shared key table, discard and count it
when it is late, stale, out of range or malformed, otherwise copy the payload into the
registered shared-memory buffer, set the packet's byte, bump the channel's count for its
chunk, and append a completion record to the channel's ring. The rules are those of
:meth:`sdr.key_table.KeyTable.resolve` (the tests check both agree packet by packet).

It runs in a worker process (``progress="offload"``) or inline in the application
(``progress="cpu"``): the same code either way. It is written for plain memoryviews,
not NumPy, because per-packet NumPy scalar access costs more than the work itself.
"""

from __future__ import annotations

from backends.offload.shared_state import CTL_WORDS, DISCARDS, ENTRY_WORDS, RECORD_WORDS, QPShared
from backends.offload.wire import HEADER, MAGIC, VERSION, PacketSource

__all__ = ["ChannelEngine", "drain"]

_LATE, _OUT_OF_RANGE, _STALE, _MALFORMED = range(len(DISCARDS))
_HDR = HEADER.size
_unpack = HEADER.unpack_from


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
        self._ring_base = channel * lay.ring_capacity * RECORD_WORDS
        self._count_base = channel * lay.slots * lay.max_chunks
        self._cap = lay.ring_capacity
        self._lay = lay

    def room(self) -> int:
        """Free records in this channel's completion ring."""
        return self._cap - (self._ctl[self._head_at] - self._ctl[self._tail_at])

    def _discard(self, reason: int) -> None:
        self._discards[self._disc_base + reason] += 1

    def handle(self, packet: memoryview) -> bool:
        """Process one packet; True when it was accepted (and a record written)."""
        if len(packet) < _HDR:
            self._discard(_MALFORMED)
            return False
        magic, version, gen, _, _, imm, remote = _unpack(packet)
        if magic != MAGIC or version != VERSION:
            self._discard(_MALFORMED)
            return False
        lay = self._lay
        length = len(packet) - _HDR
        if gen >= lay.generations:
            self._discard(_STALE)
            return False
        slot, within = divmod(remote, lay.slot_size)
        if slot >= lay.slots:
            self._discard(_OUT_OF_RANGE)
            return False
        keys = self._keys
        base = (gen * lay.slots + slot) * ENTRY_WORDS
        while True:  # seqlock read: retry while the application is writing this entry
            seq = keys[base]
            if seq & 1:
                continue
            segment, offset, bound, msg_id = keys[base + 1 : base + 5].tolist()
            if keys[base] == seq:
                break
        if segment < 0 or imm >> lay.id_shift != msg_id:
            self._discard(_LATE)
            return False
        pkt = (imm >> lay.user_bits) & lay.offset_mask
        if length == 0:
            if pkt >= lay.fragments:
                self._discard(_MALFORMED)
                return False
        else:
            if within != pkt * lay.mtu:
                self._discard(_MALFORMED)
                return False
            if within + length > bound:
                self._discard(_OUT_OF_RANGE)
                return False
            if length != min(lay.mtu, bound - within):
                self._discard(_MALFORMED)
                return False
            memory = self.segments.get(segment)
            if memory is None:
                self._discard(_MALFORMED)
                return False
            start = offset + within
            memory[start : start + length] = packet[_HDR:]
            index = slot * lay.max_packets + pkt
            if not self._packets[index]:
                self._packets[index] = 1
                chunk = pkt // lay.packets_per_chunk
                self._counts[self._count_base + slot * lay.max_chunks + chunk] += 1
        ctl = self._ctl
        head = ctl[self._head_at]
        at = self._ring_base + (head % self._cap) * RECORD_WORDS
        rings = self._rings
        rings[at] = self.channel << 8 | gen
        rings[at + 1] = imm
        rings[at + 2] = length
        rings[at + 3] = remote
        ctl[self._head_at] = head + 1  # publish after the payload and the record
        return True


def drain(engine: ChannelEngine, source: PacketSource, budget: int) -> int:
    """Feed up to ``budget`` packets from ``source`` to ``engine`` (never past ring room).

    Returns the packets taken. A full ring stops the channel: packets then wait in the
    source (and a socket drops them when its buffer fills), as a NIC drops on overflow.
    """
    limit = min(budget, engine.room())
    handle, recv = engine.handle, source.recv
    taken = 0
    while taken < limit:
        packet = recv()
        if packet is None:
            break
        handle(packet)
        taken += 1
    return taken
