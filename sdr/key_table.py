"""The receive key table (the paper's indirect root key), one per generation.

Entry (generation, slot) covers remote offsets [slot*M, (slot+1)*M) and is bound to one
receive (region, offset, length, message id) or NULL. A software driver resolves every
packet through it *before* writing: payload for a NULL entry is late, payload past the
bound length is out of range, a packet whose immediate names another message or another
offset than its address is malformed. All of these are discarded and counted, never
written. The table is a :class:`sdr.placement.PlacementTable`, and drivers place whole
batches through :meth:`KeyTable.place` (:func:`sdr.placement.place_batch`): the rules
live there, once, for every driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sdr.config import QPAttr
from sdr.placement import (
    DISCARD_REASONS,
    PLACED,
    VERDICT_NAMES,
    PlacementGeometry,
    PlacementTable,
    place_batch,
)
from sdr.transport import Bind, CompletionBatch, MemoryRegion

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

LATE, OUT_OF_RANGE, BAD_GENERATION, MALFORMED, DUPLICATE = DISCARD_REASONS
"""The reasons :meth:`KeyTable.resolve` gives; drivers count discards under these names."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a packet's payload goes: region.view[offset:offset+length]."""

    region: MemoryRegion
    offset: int


class KeyTable:
    """Bindings of receive slots to registered memory, per generation.

    Entry (generation, slot) names its region by its own index ``generation * slots +
    slot`` in :attr:`table`'s regions. A slot's placement guard is shared by its
    generations and opened again by every bind (the core binds a slot in one generation
    at a time).
    """

    def __init__(self, attr: QPAttr) -> None:
        self.geometry = PlacementGeometry.from_attr(attr)
        self.table = PlacementTable(self.geometry)
        self.generations = attr.generations
        self.slots = attr.max_messages
        self.slot_size = attr.max_message_size
        self.mtu = attr.mtu
        self._regions: dict[int, MemoryRegion] = {}

    def bind(self, binding: Bind) -> None:
        """Bind entry (generation, slot) to the binding's message and bytes, after its
        range check (:meth:`Bind.check`: ConfigError).

        The binding starts with an open placement guard: every packet may land once.
        """
        binding.check(self.slot_size)
        index = binding.generation * self.slots + binding.slot
        self._regions[index] = binding.region
        self.table.bind(binding, index)

    def unbind(self, generation: int, slot: int) -> None:
        """Point entry (generation, slot) at NULL."""
        index = generation * self.slots + slot
        self.table.unbind(generation, slot)
        self._regions.pop(index, None)
        self.table.regions.pop(index, None)

    def seal(self, generation: int, slot: int, start: int, stop: int) -> None:
        """Refuse packets [start, stop) of the message bound at (generation, slot) from now
        on (their chunk is verified: its bytes are final). No-op for a NULL entry."""
        if self.table.entry(generation, slot) is not None:
            self.table.set_packets(slot, start, stop, 1)

    def reopen(self, generation: int, slot: int, start: int, stop: int) -> None:
        """Accept packets [start, stop) once more (their chunk failed its check and awaits
        repair). No-op for a NULL entry."""
        if self.table.entry(generation, slot) is not None:
            self.table.set_packets(slot, start, stop, 0)

    def guard(self, generation: int, slot: int) -> np.ndarray | None:
        """The placement guard of entry (generation, slot): one byte per packet, 1 = no
        more writes; None for a NULL entry."""
        entry = self.table.entry(generation, slot)
        if entry is None:
            return None
        return self.table.packets[slot, : -(-entry[2] // self.mtu)]

    def place(
        self,
        generations: np.ndarray,
        remote_offsets: np.ndarray,
        imms: np.ndarray,
        lengths: np.ndarray,
        payloads: Any,
        payload_offsets: np.ndarray | None = None,
    ) -> np.ndarray:
        """Validate and place a batch (:func:`sdr.placement.place_batch` on this table)."""
        return place_batch(
            self.table, generations, remote_offsets, imms, lengths, payloads, payload_offsets
        )

    def receive(
        self,
        channels: np.ndarray,
        generations: np.ndarray,
        remote_offsets: np.ndarray,
        imms: np.ndarray,
        lengths: np.ndarray,
        payloads: Any,
        payload_offsets: np.ndarray | None = None,
    ) -> CompletionBatch:
        """:meth:`place` a batch; the completion rows of the packets it placed (validated
        against this table, so the core only matches them to receives)."""
        ok = self.place(generations, remote_offsets, imms, lengths, payloads, payload_offsets)
        ok = ok == PLACED
        return CompletionBatch(
            np.asarray(channels, dtype=np.uint16)[ok],
            np.asarray(generations)[ok].astype(np.uint8),
            np.asarray(imms, dtype=np.uint32)[ok],
            np.asarray(lengths, dtype=np.int64)[ok],
            np.asarray(remote_offsets, dtype=np.int64)[ok],
            validated=True,
        )

    def resolve(
        self, generation: int, remote_offset: int, length: int, imm: int
    ) -> Placement | str:
        """The placement of one packet's payload, or the reason it must be discarded.

        A data packet that resolves is *claimed*: its guard byte is set, so a second
        packet for the same offset resolves to DUPLICATE and is never written. The caller
        must write the payload (or drop it for good) once this returns a Placement.
        The discard is counted in :meth:`discards` as well.
        """
        out_of_int64 = not -(1 << 63) <= remote_offset < 1 << 63
        verdict = int(
            place_batch(
                self.table,
                np.array([generation if 0 <= generation < 1 << 62 else -1], dtype=np.int64),
                np.array([-1 if out_of_int64 else remote_offset], dtype=np.int64),
                np.array([imm & 0xFFFFFFFF], dtype=np.uint32),
                np.array([length], dtype=np.int64),
                None,
            )[0]
        )
        if verdict != PLACED:
            return VERDICT_NAMES[verdict]
        slot, within = divmod(remote_offset, self.slot_size)
        index = generation * self.slots + slot
        offset = int(self.table.entries[index, 2])
        return Placement(self._regions[index], offset + (within if length else 0))

    def discards(self) -> dict[str, int]:
        """Packets discarded by reason since the table was made."""
        return self.table.discard_counts()

    def bound_count(self) -> int:
        """Entries currently bound (for leak checks)."""
        return int((self.table.entries[:, 1] >= 0).sum())


class KeyTableBindings:
    """``bind``/``unbind`` of a TransportQP that resolves packets through ``self.keys``.

    Software drivers (inproc, udp, the simulator's) keep their key table in this one
    class; list it before ``TransportQP`` in the bases.
    """

    keys: KeyTable
    guards_placement = True

    def bind(self, binding: Bind) -> None:
        self.keys.bind(binding)

    def unbind(self, generation: int, slot: int) -> None:
        self.keys.unbind(generation, slot)

    def seal(self, generation: int, slot: int, start: int, stop: int) -> None:
        self.keys.seal(generation, slot, start, stop)

    def reopen(self, generation: int, slot: int, start: int, stop: int) -> None:
        self.keys.reopen(generation, slot, start, stop)
