"""The Python reference of the receive step: the rules, over arrays, then the copy.

:func:`place_batch_python` is what the native step (``sdr._placement``, C) must equal,
packet for packet; :func:`sdr.placement.place_batch` runs one or the other
(:data:`sdr.placement.DATAPATH`). It resolves each packet's generation and remote offset
through the key table, checks it against the immediate layout and the binding, copies
its payload into the bound region, sets its packet byte (the placement guard) and its
chunk's arrival count, and counts it under a discard reason when anything fails. Nothing
that fails is written.

Rules, in the order they are applied (the first that fails names the verdict):

1. the generation is not one of the QP's: ``stale_generation``;
2. a negative length, a negative offset or a slot past the table: ``out_of_range``;
3. a NULL entry, or an immediate naming another message id: ``late``;
4. an immediate-only packet (length 0) whose packet offset is not a fragment index:
   ``malformed`` (otherwise it is accepted and writes nothing);
5. an address that is not its immediate's packet offset x MTU: ``malformed``;
6. payload past the bound length: ``out_of_range``;
7. a length other than ``min(mtu, bound - offset)``: ``malformed``;
8. a packet byte already set (placed before, or sealed): ``duplicates``; never rewritten.

Rules 1-7 are :func:`classify` (4-7 alone: :func:`check_packets`); rule 8 and the copy
run packet by packet, the part native code does in one loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sdr.immediate import ImmediateLayout
from sdr.placement_table import (
    DUPLICATE,
    ENTRY_LENGTH,
    ENTRY_MSG_ID,
    ENTRY_OFFSET,
    ENTRY_REGION,
    LATE,
    MALFORMED,
    OUT_OF_RANGE,
    PLACED,
    STALE_GENERATION,
    VERDICT_NAMES,
    PlacementGeometry,
    PlacementTable,
)

__all__ = ["check_packets", "classify", "place_batch_python"]


def check_packets(
    layout: ImmediateLayout,
    mtu: int,
    packets: np.ndarray,
    within: np.ndarray,
    lengths: np.ndarray,
    bound: np.ndarray,
) -> np.ndarray:
    """Rules 4-7 over arrays: packets whose binding is known (``bound`` bytes) and whose
    address is ``within`` bytes into it. Returns verdicts (PLACED, MALFORMED or
    OUT_OF_RANGE). The core uses this alone for completions no driver checked (verbs)."""
    packets = packets.astype(np.int64, copy=False)
    imm_only = lengths == 0
    return np.select(
        [
            imm_only & (packets >= layout.fragments),
            imm_only,
            within != packets * mtu,
            within + lengths > bound,
            lengths != np.minimum(mtu, bound - within),
        ],
        [MALFORMED, PLACED, MALFORMED, OUT_OF_RANGE, MALFORMED],
        PLACED,
    ).astype(np.uint8)


def classify(
    geometry: PlacementGeometry,
    entries: np.ndarray,
    generations: np.ndarray,
    remote_offsets: np.ndarray,
    lengths: np.ndarray,
    imms: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rules 1-7 (all but the guard) over a batch.

    Returns (verdicts uint8, entry index int64, byte offset within the slot int64,
    packet offset int64), one per packet; index and offsets are meaningful where the
    verdict is PLACED.
    """
    g = geometry
    gens = np.asarray(generations).astype(np.int64, copy=False)
    remote = np.asarray(remote_offsets).astype(np.int64, copy=False)
    lengths = np.asarray(lengths).astype(np.int64, copy=False)
    ids, packets, _ = g.layout.decode_many(np.asarray(imms))
    slot, within = np.divmod(remote, g.slot_size)
    gen_ok = (gens >= 0) & (gens < g.generations)
    addr_ok = gen_ok & (remote >= 0) & (lengths >= 0) & (slot < g.slots)
    index = np.where(addr_ok, gens * g.slots + slot, 0)
    entry = entries[index]
    live = addr_ok & (entry[:, ENTRY_REGION] >= 0) & (entry[:, ENTRY_MSG_ID] == ids)
    verdicts = check_packets(g.layout, g.mtu, packets, within, lengths, entry[:, ENTRY_LENGTH])
    verdicts[~live] = LATE
    verdicts[~addr_ok] = OUT_OF_RANGE
    verdicts[~gen_ok] = STALE_GENERATION
    return verdicts, index, within, packets.astype(np.int64)


def place_batch_python(
    table: PlacementTable,
    generations: np.ndarray,
    remote_offsets: np.ndarray,
    imms: np.ndarray,
    lengths: np.ndarray,
    payloads: Sequence[Any] | Any | None,
    payload_offsets: np.ndarray | None = None,
) -> np.ndarray:
    """Validate and place one batch of received packets, in order; returns the verdicts.

    generations: uint8/int64 per packet (the endpoint that carried it).
    remote_offsets: int64, the packet's address in the receiver's key space
        (slot * slot_size + byte offset in the message).
    imms: uint32 immediates. lengths: int64 payload bytes (0: immediate-only).
    payloads: where the payload bytes are, one of
        - one staging buffer, with ``payload_offsets`` (int64): packet i's payload is
          ``payloads[payload_offsets[i] : payload_offsets[i] + lengths[i]]``;
        - a sequence of buffers, one per packet (``payload_offsets`` None), each at least
          ``lengths[i]`` bytes;
        - None: nothing is copied (a simulation that moves only bitmaps); the guard,
          the counts and the verdicts are the same.

    Updates ``table`` in place: packet bytes and chunk counts of placed packets, and
    ``table.discards`` by reason. Returns uint8 verdicts, one per packet (PLACED = 0).
    Packets of one batch are applied in order: of two copies of one packet in a batch,
    the first is placed and the second is a duplicate.
    """
    g = table.geometry
    verdicts, index, within, packets = classify(
        g, table.entries, generations, remote_offsets, lengths, imms
    )
    rows = np.flatnonzero(verdicts == PLACED)
    if len(rows):
        lengths = np.asarray(lengths).astype(np.int64, copy=False)
        data = rows[lengths[rows] > 0]
        if len(data):
            _place_rows(table, verdicts, data, index, within, packets, lengths, payloads,
                        payload_offsets)  # fmt: skip
    if len(verdicts):
        table.discards += np.bincount(verdicts, minlength=len(VERDICT_NAMES))[1:]
    return verdicts


def _place_rows(
    table: PlacementTable,
    verdicts: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    within: np.ndarray,
    packets: np.ndarray,
    lengths: np.ndarray,
    payloads: Sequence[Any] | Any | None,
    payload_offsets: np.ndarray | None,
) -> None:
    """Rule 8 and the copy, packet by packet (the part native code does in one loop)."""
    g, entries, regions = table.geometry, table.entries, table.regions
    guard, counts, ppc, slots = table.packets, table.counts, g.packets_per_chunk, g.slots
    staged = payload_offsets is not None
    sources = payload_offsets[rows].tolist() if staged else rows.tolist()  # type: ignore[index]
    for row, e, w, p, n, src in zip(
        rows.tolist(),
        index[rows].tolist(),
        within[rows].tolist(),
        packets[rows].tolist(),
        lengths[rows].tolist(),
        sources,
        strict=True,
    ):
        slot = e % slots
        if guard[slot, p]:
            verdicts[row] = DUPLICATE  # placed (or sealed) already: the first copy wins
            continue
        if payloads is not None:
            memory = regions.get(int(entries[e, ENTRY_REGION]))
            if memory is None:  # a region this writer cannot reach: forged or torn down
                verdicts[row] = MALFORMED
                continue
            start = int(entries[e, ENTRY_OFFSET]) + w
            memory[start : start + n] = (
                payloads[src : src + n] if staged else memoryview(payloads[src])[:n]
            )
        guard[slot, p] = 1
        counts[slot, p // ppc] += 1
