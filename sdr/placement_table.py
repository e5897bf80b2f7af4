"""The receive step's state and vocabulary: verdict codes, key-table entries, the table.

What :func:`sdr.placement.place_batch` reads and updates, as flat arrays, so that the
Python reference (:mod:`sdr.placement_reference`), the native step (``sdr._placement``)
and the offload backend's shared memory all hold one layout: a QP's geometry
(:class:`PlacementGeometry`), its key-table entries, packet bytes (the placement guard),
chunk counts and discard counters (:class:`PlacementTable`), and the read-out of which
chunks of a binding are whole (:func:`chunk_bitmap`).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sdr.config import QPAttr
from sdr.immediate import ImmediateLayout
from sdr.transport import Bind

__all__ = [
    "DISCARD_REASONS",
    "DUPLICATE",
    "ENTRY_LENGTH",
    "ENTRY_MSG_ID",
    "ENTRY_OFFSET",
    "ENTRY_REGION",
    "ENTRY_WORDS",
    "LATE",
    "MALFORMED",
    "OUT_OF_RANGE",
    "PLACED",
    "STALE_GENERATION",
    "VERDICT_NAMES",
    "PlacementGeometry",
    "PlacementTable",
    "chunk_bitmap",
]

PLACED, LATE, OUT_OF_RANGE, STALE_GENERATION, MALFORMED, DUPLICATE = range(6)
"""Verdict codes (uint8), one per packet of a batch: 0 = placed, else a discard reason."""
DISCARD_REASONS = ("late", "out_of_range", "stale_generation", "malformed", "duplicates")
"""Counter names of verdicts 1..5, in code order (``discards[code - 1]``)."""
VERDICT_NAMES = ("placed", *DISCARD_REASONS)

ENTRY_WORDS = 6
"""A key-table entry is six int64 words: [seq, region, offset, length, msg_id, spare].
``region`` < 0 is NULL; ``seq`` is the offload backend's seqlock word (unused elsewhere)."""
ENTRY_REGION, ENTRY_OFFSET, ENTRY_LENGTH, ENTRY_MSG_ID = 1, 2, 3, 4
"""Word indices of an entry's region, offset, length and message id."""


@dataclass(frozen=True, slots=True)
class PlacementGeometry:
    """What the receive step must know of a QP: its immediate split and its key space."""

    layout: ImmediateLayout
    generations: int
    slots: int
    slot_size: int
    mtu: int
    packets_per_chunk: int

    @classmethod
    def from_attr(cls, attr: QPAttr) -> PlacementGeometry:
        return cls(
            attr.layout,
            attr.generations,
            attr.max_messages,
            attr.max_message_size,
            attr.mtu,
            attr.packets_per_chunk,
        )

    @property
    def max_packets(self) -> int:
        """Packet bytes per slot (the largest message's packets)."""
        return max(1, -(-self.slot_size // self.mtu))

    @property
    def max_chunks(self) -> int:
        """Chunk counts per slot."""
        return -(-self.max_packets // self.packets_per_chunk)


class PlacementTable:
    """The arrays one writer of the receive step reads and updates.

    entries: int64 ``(generations * slots, ENTRY_WORDS)``, entry ``g * slots + s``.
    packets: uint8 ``(slots, max_packets)``, 1 = placed or sealed (the placement guard).
    counts: uint32 ``(slots, max_chunks)``, packets this writer placed per chunk.
    discards: int64 ``(5,)``, packets discarded by reason (:data:`DISCARD_REASONS`).
    regions: region id -> writable byte buffer; an entry's offset is into its region.

    Arrays not given are allocated zeroed (``np.zeros``: pages are touched on first use,
    so a large key space costs only what is bound). The offload backend passes views of
    shared memory instead.
    """

    __slots__ = ("geometry", "entries", "packets", "counts", "discards", "regions")

    def __init__(
        self,
        geometry: PlacementGeometry,
        entries: np.ndarray | None = None,
        packets: np.ndarray | None = None,
        counts: np.ndarray | None = None,
        discards: np.ndarray | None = None,
        regions: MutableMapping[int, Any] | None = None,
    ) -> None:
        g = geometry
        self.geometry = g
        if entries is None:
            entries = np.zeros((g.generations * g.slots, ENTRY_WORDS), dtype=np.int64)
            entries[:, ENTRY_REGION] = entries[:, ENTRY_MSG_ID] = -1
        self.entries = entries
        self.packets = np.zeros((g.slots, g.max_packets), np.uint8) if packets is None else packets
        self.counts = np.zeros((g.slots, g.max_chunks), np.uint32) if counts is None else counts
        self.discards = np.zeros(len(DISCARD_REASONS), np.int64) if discards is None else discards
        self.regions: MutableMapping[int, Any] = {} if regions is None else regions

    def bind(self, binding: Bind, region_id: int) -> None:
        """Point entry (generation, slot) at the binding's bytes for its message, its
        region's view kept as ``regions[region_id]``, and open the slot's guard: every
        packet may land once. No range check: :meth:`Bind.check` is the caller's (a
        :class:`sdr.key_table.KeyTable`'s), so tests and fuzzers can bind what it refuses."""
        g, slot, length = self.geometry, binding.slot, binding.length
        self.regions[region_id] = binding.region.view
        n_packets = -(-length // g.mtu)
        self.packets[slot, :n_packets] = 0
        self.counts[slot, : -(-n_packets // g.packets_per_chunk)] = 0
        entry = (region_id, binding.offset, length, binding.msg_id)
        self.entries[binding.generation * g.slots + slot, 1:5] = entry

    def unbind(self, generation: int, slot: int) -> None:
        """Point entry (generation, slot) at NULL."""
        self.entries[generation * self.geometry.slots + slot, 1:5] = (-1, 0, 0, -1)

    def entry(self, generation: int, slot: int) -> tuple[int, int, int, int] | None:
        """(region, offset, length, msg_id) of a bound entry, None for NULL."""
        row = self.entries[generation * self.geometry.slots + slot]
        if row[ENTRY_REGION] < 0:
            return None
        return (
            int(row[ENTRY_REGION]),
            int(row[ENTRY_OFFSET]),
            int(row[ENTRY_LENGTH]),
            int(row[ENTRY_MSG_ID]),
        )

    def set_packets(self, slot: int, start: int, stop: int, value: int) -> None:
        """Packet bytes [start, stop) of a slot to ``value``: 1 seals, 0 reopens."""
        stop = min(stop, self.geometry.max_packets)
        start = max(start, 0)
        if start < stop:
            self.packets[slot, start:stop] = value

    def discard_counts(self) -> dict[str, int]:
        return dict(zip(DISCARD_REASONS, self.discards.tolist(), strict=True))


def chunk_bitmap(
    geometry: PlacementGeometry, packets: np.ndarray, counts: np.ndarray, length: int
) -> np.ndarray:
    """Chunks of a ``length``-byte binding whose packets have all been placed.

    packets: the slot's packet bytes; counts: its chunk counts, one row per writer
    (summed). A chunk whose count reaches its size is confirmed on the packet bytes,
    which duplicates cannot inflate and seals do not count.
    """
    ppc = geometry.packets_per_chunk
    n_packets = -(-length // geometry.mtu)
    n_chunks = -(-n_packets // ppc)
    total = np.atleast_2d(counts)[:, :n_chunks].sum(axis=0)
    expected = np.full(n_chunks, ppc, dtype=np.int64)
    if n_chunks:
        expected[-1] = n_packets - (n_chunks - 1) * ppc
    bits = total >= expected
    for chunk in np.flatnonzero(bits).tolist():
        start = chunk * ppc
        bits[chunk] = bool(packets[start : start + expected[chunk]].all())
    return bits
