"""The software NIC's receive step: validate, place, mark and count a batch of packets.

Every software driver (inproc, udp, offload, the simulator's) receives a packet the same
way, and does it here: resolve its generation and remote offset through the key table,
check it against the immediate layout and the binding, copy its payload into the bound
region, set its packet byte (the placement guard) and its chunk's arrival count, and
count it under a discard reason when anything fails. Nothing that fails is written.

The state is flat arrays (a :class:`PlacementTable`) and a batch is arrays, so the same
step runs over a Python key table (:class:`sdr.key_table.KeyTable`), over the offload
backend's shared memory, and in native code behind the same signature
(:func:`place_batch`). This module is the reference implementation.

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

Two implementations sit behind :func:`place_batch`: the native one (``sdr._placement``,
C, built by the package's own build) and this module's :func:`place_batch_python`, the
reference. The native one is used when it is built, unless the environment variable
``SDR_DATAPATH=python`` is set at import or :func:`use_datapath` chooses otherwise;
:data:`DATAPATH` names the one in use (docs/native.md).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sdr.config import QPAttr
from sdr.errors import ConfigError
from sdr.immediate import ImmediateLayout
from sdr.native import load_extension

__all__ = [
    "DISCARD_REASONS",
    "DUPLICATE",
    "ENTRY_WORDS",
    "LATE",
    "MALFORMED",
    "OUT_OF_RANGE",
    "PLACED",
    "STALE_GENERATION",
    "VERDICT_NAMES",
    "DATAPATH",
    "DATAPATH_ENV",
    "PlacementGeometry",
    "PlacementTable",
    "check_packets",
    "chunk_bitmap",
    "classify",
    "int64_column",
    "place_batch",
    "place_batch_native",
    "mark_arrivals_native",
    "place_batch_python",
    "use_datapath",
]

PLACED, LATE, OUT_OF_RANGE, STALE_GENERATION, MALFORMED, DUPLICATE = range(6)
"""Verdict codes (uint8), one per packet of a batch: 0 = placed, else a discard reason."""
DISCARD_REASONS = ("late", "out_of_range", "stale_generation", "malformed", "duplicates")
"""Counter names of verdicts 1..5, in code order (``discards[code - 1]``)."""
VERDICT_NAMES = ("placed", *DISCARD_REASONS)

ENTRY_WORDS = 6
"""A key-table entry is six int64 words: [seq, region, offset, length, msg_id, spare].
``region`` < 0 is NULL; ``seq`` is the offload backend's seqlock word (unused elsewhere)."""
_REGION, _OFFSET, _LENGTH, _MSG_ID = 1, 2, 3, 4


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
            entries[:, _REGION] = entries[:, _MSG_ID] = -1
        self.entries = entries
        self.packets = np.zeros((g.slots, g.max_packets), np.uint8) if packets is None else packets
        self.counts = np.zeros((g.slots, g.max_chunks), np.uint32) if counts is None else counts
        self.discards = np.zeros(len(DISCARD_REASONS), np.int64) if discards is None else discards
        self.regions: MutableMapping[int, Any] = {} if regions is None else regions

    def bind(
        self, generation: int, slot: int, region: int, offset: int, length: int, msg_id: int
    ) -> None:
        """Point entry (generation, slot) at region[offset:+length] for ``msg_id`` and open
        the slot's guard: every packet may land once."""
        g = self.geometry
        n_packets = -(-length // g.mtu)
        self.packets[slot, :n_packets] = 0
        self.counts[slot, : -(-n_packets // g.packets_per_chunk)] = 0
        self.entries[generation * g.slots + slot, 1:5] = (region, offset, length, msg_id)

    def unbind(self, generation: int, slot: int) -> None:
        """Point entry (generation, slot) at NULL."""
        self.entries[generation * self.geometry.slots + slot, 1:5] = (-1, 0, 0, -1)

    def entry(self, generation: int, slot: int) -> tuple[int, int, int, int] | None:
        """(region, offset, length, msg_id) of a bound entry, None for NULL."""
        row = self.entries[generation * self.geometry.slots + slot]
        if row[_REGION] < 0:
            return None
        return int(row[_REGION]), int(row[_OFFSET]), int(row[_LENGTH]), int(row[_MSG_ID])

    def set_packets(self, slot: int, start: int, stop: int, value: int) -> None:
        """Packet bytes [start, stop) of a slot to ``value``: 1 seals, 0 reopens."""
        stop = min(stop, self.geometry.max_packets)
        start = max(start, 0)
        if start < stop:
            self.packets[slot, start:stop] = value

    def discard_counts(self) -> dict[str, int]:
        return dict(zip(DISCARD_REASONS, self.discards.tolist(), strict=True))


def int64_column(values: Sequence[int]) -> np.ndarray:
    """Python ints from a wire as int64; a value int64 cannot hold becomes -1, which every
    column of :func:`place_batch` refuses (a negative generation, offset or length)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        low, high = -(1 << 63), 1 << 63
        return np.array([v if low <= v < high else -1 for v in values], dtype=np.int64)


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
    live = addr_ok & (entry[:, _REGION] >= 0) & (entry[:, _MSG_ID] == ids)
    verdicts = check_packets(g.layout, g.mtu, packets, within, lengths, entry[:, _LENGTH])
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
            memory = regions.get(int(entries[e, _REGION]))
            if memory is None:  # a region this writer cannot reach: forged or torn down
                verdicts[row] = MALFORMED
                continue
            start = int(entries[e, _OFFSET]) + w
            memory[start : start + n] = (
                payloads[src : src + n] if staged else memoryview(payloads[src])[:n]
            )
        guard[slot, p] = 1
        counts[slot, p // ppc] += 1


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


# --- which implementation runs (the native one when built) ------------------------------

DATAPATH_ENV = "SDR_DATAPATH"
"""Environment variable read at import: ``python`` runs the reference even where the
native implementation is built; ``native`` (or unset) the native one where it is."""
_NATIVE_FILE_ENV = "SDR_PLACEMENT_NATIVE"
"""A path to a build of ``sdr._placement`` to load instead of the installed one (the
sanitizer build, ``make asan``)."""


_native, NATIVE_ERROR = load_extension("sdr._placement", _NATIVE_FILE_ENV)

place_batch_native: Any = None if _native is None else _native.place_batch
"""The native place_batch (``sdr._placement``), None where it was not built."""
mark_arrivals_native: Any = getattr(_native, "mark_arrivals", None)  # None: an older build
"""The native twin of the receive table's arrival marking (RecvTable._apply), None where
``sdr._placement`` was not built; it runs where :data:`DATAPATH` is ``native``."""

DATAPATH = "python"
"""The implementation :func:`place_batch` runs: ``native`` or ``python``."""
_impl: Any = place_batch_python


def use_datapath(name: str) -> str:
    """Make :func:`place_batch` run ``name`` (``native`` or ``python``); returns the
    previous choice. Raises ConfigError for another name or a native one not built."""
    global DATAPATH, _impl
    if name not in ("native", "python"):
        raise ConfigError(f"datapath must be 'native' or 'python', got {name!r}")
    if name == "native" and place_batch_native is None:
        raise ConfigError(f"the native datapath is not built ({NATIVE_ERROR})")
    previous, DATAPATH = DATAPATH, name
    _impl = place_batch_native if name == "native" else place_batch_python
    return previous


def _initial_datapath() -> None:
    wanted = os.environ.get(DATAPATH_ENV, "").strip().lower()
    if wanted not in ("", "native", "python"):
        warnings.warn(
            f"{DATAPATH_ENV} must be 'native' or 'python', got {wanted!r}: using the default",
            RuntimeWarning,
            stacklevel=3,
        )
        wanted = ""
    if wanted == "python":
        return
    if place_batch_native is None:
        warnings.warn(
            f"sdr._placement is not built ({NATIVE_ERROR}): packets are placed by the "
            "Python reference (reinstall with a C compiler for the native datapath)",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    use_datapath("native")


_initial_datapath()


def place_batch(
    table: PlacementTable,
    generations: np.ndarray,
    remote_offsets: np.ndarray,
    imms: np.ndarray,
    lengths: np.ndarray,
    payloads: Sequence[Any] | Any | None,
    payload_offsets: np.ndarray | None = None,
) -> np.ndarray:
    """Validate and place one batch of received packets, in order; returns the verdicts.

    The rules and arguments are :func:`place_batch_python`'s; this runs the implementation
    :data:`DATAPATH` names. The native one takes integer arrays (any integer dtype,
    C-contiguous) and byte buffers, and raises TypeError or ValueError, having placed
    nothing, where an input does not fit the table or a copy would leave a buffer.
    """
    return _impl(table, generations, remote_offsets, imms, lengths, payloads, payload_offsets)
