"""Shared-memory state of one offload QP, and the segments it lives in.

One segment per QP holds, as flat arrays any process can map:

- the key table, ``generations x slots`` entries of 6 int64 words
  ``[seq, segment, offset, length, msg_id, spare]`` behind a seqlock: the application is
  the only writer (``seq`` odd while it writes), workers only read and retry on a change;
- per channel: discard counters, a completion ring (head written by the channel's worker,
  tail by the application) and per-chunk arrival counts;
- per slot: one byte per packet (1 = placed).

Every word has a single writer, so no atomics are needed: aligned 8-byte stores are
atomic on x86-64 and its stores are seen in program order (payload before record before
head). A port to a weakly ordered CPU needs release/acquire fences at the ring head.
The one exception is a packet byte written by two channels' workers when a retransmission
takes another channel: both write 1, so the race is benign; the application therefore
checks packet bytes, not only counts, before it reports a chunk (see ``chunk_bitmap``).
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import weakref
from dataclasses import asdict, dataclass
from multiprocessing import resource_tracker

import numpy as np

from sdr.config import QPAttr
from sdr.errors import TransportError
from sdr.immediate import ImmediateLayout
from sdr.placement import (
    DISCARD_REASONS,
    ENTRY_WORDS,
    PlacementGeometry,
    PlacementTable,
)
from sdr.placement import chunk_bitmap as placed_chunks

__all__ = [
    "DISCARDS",
    "ENTRY_WORDS",
    "RECORD_WORDS",
    "QPLayout",
    "QPShared",
    "Segment",
    "attach_segment",
    "layout_for",
    "segment_prefix",
]

RECORD_WORDS = 4  # (channel << 8 | generation), imm, byte_len, remote_offset
CTL_WORDS = 16  # head at word 0, tail at word 8: two cache lines, two writers
DISCARDS = DISCARD_REASONS
_names = itertools.count()


def segment_prefix() -> str:
    """Name prefix of this process's segments in /dev/shm (for leak checks)."""
    return f"sdr_off_{os.getpid()}_"


def _unlink(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"/dev/shm/{name}")
    resource_tracker.unregister(f"/{name}", "shared_memory")


class Segment:
    """A named shared-memory segment created (and finally unlinked) by this process.

    It lives in /dev/shm under :func:`segment_prefix` and is registered with
    multiprocessing's resource tracker, so a crashed application still unlinks it.
    """

    def __init__(self, size: int) -> None:
        self.name = f"{segment_prefix()}{next(_names)}"
        self.size = max(1, size)
        try:
            fd = os.open(f"/dev/shm/{self.name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as exc:
            raise TransportError(f"cannot create shared memory of {size} bytes: {exc}") from exc
        try:
            os.ftruncate(fd, self.size)
            self._map = mmap.mmap(fd, self.size)
        except OSError as exc:
            os.unlink(f"/dev/shm/{self.name}")
            raise TransportError(f"cannot map shared memory of {size} bytes: {exc}") from exc
        finally:
            os.close(fd)
        resource_tracker.register(f"/{self.name}", "shared_memory")
        self.buf: memoryview = memoryview(self._map)
        # unlinked on destroy(), or when forgotten: at garbage collection or exit
        self._unlink = weakref.finalize(self, _unlink, self.name)

    def address(self) -> int:
        """The segment's base address in this process (to recognise views into it)."""
        return int(np.frombuffer(self.buf, dtype=np.uint8).ctypes.data)

    def destroy(self) -> None:
        """Unlink the name; unmap too unless views are still exported (freed with them)."""
        self._unlink()
        try:
            self.buf.release()
            self._map.close()
        except BufferError:
            pass  # a NumPy array still uses the mapping; the memory goes with it


def attach_segment(name: str, size: int) -> mmap.mmap:
    """Map a segment by name in a worker (plain mmap: no resource-tracker bookkeeping)."""
    fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class QPLayout:
    """Geometry of one QP's shared state (picklable: it travels to the workers)."""

    generations: int
    slots: int
    channels: int
    max_packets: int  # per message
    max_chunks: int  # per message
    packets_per_chunk: int
    slot_size: int
    mtu: int
    id_shift: int
    user_bits: int
    offset_mask: int
    fragments: int
    ring_capacity: int = 8192

    def sizes(self) -> dict[str, int]:
        """Byte size of each array, in layout order."""
        return {
            "keys": self.generations * self.slots * ENTRY_WORDS * 8,
            "discards": self.channels * len(DISCARDS) * 8,
            "ctl": self.channels * CTL_WORDS * 8,
            "rings": self.channels * self.ring_capacity * RECORD_WORDS * 8,
            "counts": self.channels * self.slots * self.max_chunks * 4,
            "packets": self.slots * self.max_packets,
        }

    @property
    def nbytes(self) -> int:
        return sum(self.sizes().values())

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def geometry(self) -> PlacementGeometry:
        """What the software-NIC step must know of this QP."""
        id_bits = 32 - self.id_shift
        offset_bits = self.id_shift - self.user_bits
        layout = ImmediateLayout(id_bits, offset_bits, self.user_bits)
        return PlacementGeometry(
            layout, self.generations, self.slots, self.slot_size, self.mtu,
            self.packets_per_chunk,
        )  # fmt: skip


class QPShared:
    """Typed views of one QP's shared state over any buffer (app or worker mapping)."""

    def __init__(self, buf: memoryview | mmap.mmap, layout: QPLayout) -> None:
        self.layout = layout
        self._geometry = layout.geometry
        mv = memoryview(buf)
        views: dict[str, memoryview] = {}
        start = 0
        for name, size in layout.sizes().items():
            views[name] = mv[start : start + size]
            start += size
        self.keys = views["keys"].cast("q")
        self.discards = views["discards"].cast("q")
        self.ctl = views["ctl"].cast("q")
        self.rings = views["rings"].cast("q")
        self.ring_bytes = views["rings"]  # the same records as raw bytes (struct.pack_into)
        self.counts = views["counts"].cast("I")
        self.packets = views["packets"]
        self._raw = views

    # --- application side (the single writer of keys, tails and slot resets) -----------
    def write_entry(
        self, generation: int, slot: int, segment: int, offset: int, length: int, msg_id: int
    ) -> None:
        """Bind a key-table entry (seqlock write: readers retry while seq is odd)."""
        base = (generation * self.layout.slots + slot) * ENTRY_WORDS
        keys = self.keys
        seq = keys[base]
        keys[base] = seq + 1
        keys[base + 1] = segment
        keys[base + 2] = offset
        keys[base + 3] = length
        keys[base + 4] = msg_id
        keys[base] = seq + 2

    def clear_entry(self, generation: int, slot: int) -> None:
        """Point an entry at NULL (segment -1)."""
        self.write_entry(generation, slot, -1, 0, 0, -1)

    def reset_slot(self, slot: int) -> None:
        """Zero a slot's packet bytes and chunk counts (only while the slot is unbound)."""
        lay = self.layout
        np.frombuffer(self._raw["packets"], dtype=np.uint8)[
            slot * lay.max_packets : (slot + 1) * lay.max_packets
        ] = 0
        counts = np.frombuffer(self._raw["counts"], dtype=np.uint32).reshape(lay.channels, -1)
        counts[:, slot * lay.max_chunks : (slot + 1) * lay.max_chunks] = 0

    def set_packets(self, slot: int, start: int, stop: int, value: int) -> None:
        """Set a bound slot's packet bytes [start, stop) to ``value``: 1 seals them (no more
        writes: their chunk is verified), 0 reopens them for a repair."""
        lay = self.layout
        stop = min(stop, lay.max_packets)
        if 0 <= start < stop:
            np.frombuffer(self._raw["packets"], dtype=np.uint8)[
                slot * lay.max_packets + start : slot * lay.max_packets + stop
            ] = value

    def entries_snapshot(self) -> np.ndarray:
        """A consistent copy of the key table, ``(generations * slots, ENTRY_WORDS)``:
        retried while the application is writing an entry (seqlock)."""
        live = np.frombuffer(self._raw["keys"], dtype=np.int64).reshape(-1, ENTRY_WORDS)
        while True:
            before = live[:, 0].copy()
            snapshot = live.copy()
            if not (before & 1).any() and np.array_equal(before, live[:, 0]):
                return snapshot

    def placement_table(self, channel: int, segments: dict[int, memoryview]) -> PlacementTable:
        """The software-NIC state of one channel's writer: a snapshot of the key table,
        the shared packet bytes, and this channel's chunk counts and discard counters
        (views: build one per batch and drop it, so :meth:`release` can unmap)."""
        lay = self.layout
        packets = np.frombuffer(self._raw["packets"], dtype=np.uint8)
        counts = np.frombuffer(self._raw["counts"], dtype=np.uint32)
        discards = np.frombuffer(self._raw["discards"], dtype=np.int64)
        return PlacementTable(
            self._geometry,
            self.entries_snapshot(),
            packets.reshape(lay.slots, lay.max_packets),
            counts.reshape(lay.channels, lay.slots, lay.max_chunks)[channel],
            discards.reshape(lay.channels, len(DISCARDS))[channel],
            segments,
        )

    def pending(self, channel: int) -> int:
        """Completion records waiting in a channel's ring."""
        return self.ctl[channel * CTL_WORDS] - self.ctl[channel * CTL_WORDS + 8]

    def read_ring(self, channel: int, max_records: int) -> np.ndarray:
        """Take up to ``max_records`` completion records: an (n, 4) int64 copy."""
        lay, ctl = self.layout, self.ctl
        head, tail = ctl[channel * CTL_WORDS], ctl[channel * CTL_WORDS + 8]
        n = min(head - tail, max_records)
        if n <= 0:
            return np.empty((0, RECORD_WORDS), dtype=np.int64)
        ring = np.frombuffer(self._raw["rings"], dtype=np.int64).reshape(
            lay.channels, lay.ring_capacity, RECORD_WORDS
        )[channel]
        first = tail % lay.ring_capacity
        idx = (first + np.arange(n)) % lay.ring_capacity
        out = ring[idx].copy()
        ctl[channel * CTL_WORDS + 8] = tail + n
        return out

    def discard_counts(self) -> dict[str, int]:
        """Discards summed over channels, by reason."""
        arr = np.frombuffer(self._raw["discards"], dtype=np.int64).reshape(-1, len(DISCARDS))
        return {name: int(v) for name, v in zip(DISCARDS, arr.sum(axis=0).tolist(), strict=True)}

    def chunk_bitmap(self, slot: int, length: int) -> np.ndarray:
        """Chunks of the message bound to ``slot`` whose packets have all been placed.

        Counts (one writer per channel) are summed first; a chunk that reaches its
        expected count is confirmed on the packet bytes, which duplicates cannot inflate
        (:func:`sdr.placement.chunk_bitmap`).
        """
        lay = self.layout
        counts = np.frombuffer(self._raw["counts"], dtype=np.uint32)
        counts = counts.reshape(lay.channels, lay.slots, lay.max_chunks)[:, slot]
        packets = np.frombuffer(self._raw["packets"], dtype=np.uint8)
        packets = packets[slot * lay.max_packets : (slot + 1) * lay.max_packets]
        return placed_chunks(lay.geometry, packets, counts, length)

    def release(self) -> None:
        """Drop the typed views (so the mapping can be closed)."""
        for view in (self.keys, self.discards, self.ctl, self.rings, self.counts, self.packets):
            view.release()
        for view in self._raw.values():
            view.release()


def layout_for(attr: QPAttr) -> QPLayout:
    """The shared-state geometry of a QP with these attributes."""
    lay = attr.layout
    max_packets = max(1, -(-attr.max_message_size // attr.mtu))
    return QPLayout(
        generations=attr.generations,
        slots=attr.max_messages,
        channels=attr.channels,
        max_packets=max_packets,
        max_chunks=-(-max_packets // attr.packets_per_chunk),
        packets_per_chunk=attr.packets_per_chunk,
        slot_size=attr.max_message_size,
        mtu=attr.mtu,
        id_shift=lay.offset_bits + lay.user_bits,
        user_bits=lay.user_bits,
        offset_mask=lay.max_packets - 1,
        fragments=lay.fragments,
    )
