"""The receive key table (the paper's indirect root key), one per generation.

Entry (generation, slot) covers remote offsets [slot*M, (slot+1)*M) and is bound to one
receive (region, offset, length, message id) or NULL. A software driver resolves every
packet here *before* writing: payload for a NULL entry is late, payload past the bound
length is out of range, a packet whose immediate names another message or another
offset than its address is malformed. All of these are discarded and counted, never
written. Every driver uses this one implementation, so the guarantee is tested once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdr.config import QPAttr
from sdr.transport import MemoryRegion

__all__ = [
    "KeyTable",
    "KeyTableBindings",
    "Placement",
    "LATE",
    "OUT_OF_RANGE",
    "BAD_GENERATION",
    "MALFORMED",
    "DUPLICATE",
    "DISCARD_REASONS",
]

LATE = "late"
OUT_OF_RANGE = "out_of_range"
BAD_GENERATION = "stale_generation"
MALFORMED = "malformed"
DUPLICATE = "duplicates"
DISCARD_REASONS = (LATE, OUT_OF_RANGE, BAD_GENERATION, MALFORMED, DUPLICATE)
"""Every reason :meth:`KeyTable.resolve` gives; drivers count discards under these names."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a packet's payload goes: region.view[offset:offset+length]."""

    region: MemoryRegion
    offset: int


class KeyTable:
    """Bindings of receive slots to registered memory, per generation."""

    def __init__(self, attr: QPAttr) -> None:
        self.generations = attr.generations
        self.slots = attr.max_messages
        self.slot_size = attr.max_message_size
        self.mtu = attr.mtu
        layout = attr.layout
        self._id_shift = layout.offset_bits + layout.user_bits
        self._user_bits = layout.user_bits
        self._offset_mask = layout.max_packets - 1
        self._fragments = layout.fragments
        self._entries: list[list[tuple[MemoryRegion, int, int, int, np.ndarray] | None]] = [
            [None] * self.slots for _ in range(self.generations)
        ]

    def bind(
        self,
        generation: int,
        slot: int,
        region: MemoryRegion,
        offset: int,
        length: int,
        msg_id: int,
    ) -> None:
        """Bind entry (generation, slot) to message ``msg_id`` at region[offset:+length].

        The binding starts with an open placement guard: every packet may land once.
        """
        region.check_range(offset, length)
        if length > self.slot_size:
            raise ValueError(f"binding of {length} bytes exceeds slot size {self.slot_size}")
        guard = np.zeros(-(-length // self.mtu), dtype=np.uint8)
        self._entries[generation][slot] = (region, offset, length, msg_id, guard)

    def unbind(self, generation: int, slot: int) -> None:
        """Point entry (generation, slot) at NULL."""
        self._entries[generation][slot] = None

    def seal(self, generation: int, slot: int, start: int, stop: int) -> None:
        """Refuse packets [start, stop) of the message bound at (generation, slot) from now
        on (their chunk is verified: its bytes are final). No-op for a NULL entry."""
        entry = self._entries[generation][slot]
        if entry is not None:
            entry[4][max(start, 0) : stop] = 1

    def reopen(self, generation: int, slot: int, start: int, stop: int) -> None:
        """Accept packets [start, stop) once more (their chunk failed its check and awaits
        repair). No-op for a NULL entry."""
        entry = self._entries[generation][slot]
        if entry is not None:
            entry[4][max(start, 0) : stop] = 0

    def guard(self, generation: int, slot: int) -> np.ndarray | None:
        """The placement guard of entry (generation, slot): one byte per packet, 1 = no
        more writes; None for a NULL entry. Drivers that place in batches use it."""
        entry = self._entries[generation][slot]
        return None if entry is None else entry[4]

    def resolve(
        self, generation: int, remote_offset: int, length: int, imm: int
    ) -> Placement | str:
        """The placement of one packet's payload, or the reason it must be discarded.

        A data packet that resolves is *claimed*: its guard byte is set, so a second
        packet for the same offset resolves to DUPLICATE and is never written. The caller
        must write the payload (or drop it for good) once this returns a Placement.
        """
        if not 0 <= generation < self.generations:
            return BAD_GENERATION
        slot, within = divmod(remote_offset, self.slot_size)
        if remote_offset < 0 or length < 0 or slot >= self.slots:
            return OUT_OF_RANGE
        entry = self._entries[generation][slot]
        if entry is None:
            return LATE
        region, offset, bound, msg_id, guard = entry
        if imm >> self._id_shift != msg_id:
            return LATE  # another message's packet: stale after an id wrap, or forged
        packet = (imm >> self._user_bits) & self._offset_mask
        if length == 0:  # immediate-only packet: carries a fragment, writes nothing
            return Placement(region, offset) if packet < self._fragments else MALFORMED
        if within != packet * self.mtu:
            return MALFORMED
        if within + length > bound:
            return OUT_OF_RANGE
        if length != min(self.mtu, bound - within):
            return MALFORMED
        if guard[packet]:
            return DUPLICATE  # placed (or sealed) already: first copy wins
        guard[packet] = 1
        return Placement(region, offset + within)

    def bound_count(self) -> int:
        """Entries currently bound (for leak checks)."""
        return sum(e is not None for gen in self._entries for e in gen)


class KeyTableBindings:
    """``bind``/``unbind`` of a TransportQP that resolves packets through ``self.keys``.

    Software drivers (inproc, udp, the simulator's) keep their key table in this one
    class; list it before ``TransportQP`` in the bases.
    """

    keys: KeyTable
    guards_placement = True

    def bind(
        self,
        generation: int,
        slot: int,
        region: MemoryRegion,
        offset: int,
        length: int,
        msg_id: int,
    ) -> None:
        self.keys.bind(generation, slot, region, offset, length, msg_id)

    def unbind(self, generation: int, slot: int) -> None:
        self.keys.unbind(generation, slot)

    def seal(self, generation: int, slot: int, start: int, stop: int) -> None:
        self.keys.seal(generation, slot, start, stop)

    def reopen(self, generation: int, slot: int, start: int, stop: int) -> None:
        self.keys.reopen(generation, slot, start, stop)
