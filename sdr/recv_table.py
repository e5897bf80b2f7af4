"""The receive side of an SDR QP: message slots, order-based matching, generations, CTS.

The n-th posted receive matches the n-th message the peer sends. Receive n takes message
id n mod 2^id_bits, slot n mod max_messages and generation (n div max_messages) mod
generations (:func:`sdr.id_reuse.receive_triple`), so the triple that a packet must match
repeats only every :func:`sdr.id_reuse.reuse_period` receives (130,048 with the default
attributes): a straggler of an earlier message cannot land in a later one unless it
outlived that many messages (docs/reliability.md, "Stragglers"). Posting binds the
key-table entry and sends a CTS. Packet
completions are matched to their receive (message id, generation, slot) before they touch
the bitmap, and checked against its binding unless a driver placed them through the
software-NIC step (:mod:`sdr.placement`), which did that already; anything that fails is
counted, never marked. Each batch reports the chunks it completed. Completing a receive unbinds its
slot, so later packets of that message are discarded by the driver (late-packet guard).
"""

from __future__ import annotations

import enum

import numpy as np

from sdr import placement
from sdr.actions import Action, Bind, Reopen, Seal, SendControl, Unbind
from sdr.chunk_bitmap import ReceiveBitmap
from sdr.config import QPAttr
from sdr.control import CTS
from sdr.counters import QPCounters
from sdr.errors import ConfigError, ResourceBusy
from sdr.id_reuse import receive_triple
from sdr.placement import MALFORMED, OUT_OF_RANGE, PLACED, check_packets
from sdr.transport import CompletionBatch, MemoryRegion

__all__ = ["RecvRecord", "RecvState", "RecvTable"]


class RecvState(enum.Enum):
    ACTIVE = "active"
    COMPLETED = "completed"


class RecvRecord:
    """One posted receive: where its bytes land and what has arrived."""

    __slots__ = (
        "seq",
        "msg_id",
        "slot",
        "generation",
        "region",
        "offset",
        "length",
        "bitmap",
        "state",
        "_fragments",
        "_have",
        "_user_bits",
    )

    def __init__(
        self,
        seq: int,
        msg_id: int,
        slot: int,
        generation: int,
        region: MemoryRegion,
        offset: int,
        length: int,
        attr: QPAttr,
    ) -> None:
        self.seq = seq
        self.msg_id = msg_id
        self.slot = slot
        self.generation = generation
        self.region = region
        self.offset = offset
        self.length = length
        self.bitmap = ReceiveBitmap(length, attr.mtu, attr.chunk_size)
        self.state = RecvState.ACTIVE
        fragments = attr.layout.fragments
        self._fragments = np.zeros(fragments, dtype=np.uint32)
        self._have = np.zeros(fragments, dtype=bool)
        self._user_bits = attr.user_imm_bits

    @property
    def imm(self) -> int | None:
        """The sender's 32-bit immediate, or None until all its fragments arrived."""
        if not self._have.all():
            return None
        value = 0
        for index, fragment in enumerate(self._fragments.tolist()):
            value |= fragment << (index * self._user_bits)
        return value & 0xFFFFFFFF

    @property
    def arrived(self) -> bool:
        """Every chunk and the whole immediate have arrived."""
        return self.bitmap.complete and bool(self._have.all())

    def take_fragment(self, index: int, value: int) -> None:
        """Record one fragment of the immediate (the first arrival wins)."""
        if not self._have[index]:
            self._fragments[index] = value
            self._have[index] = True

    def mark_native(
        self,
        packets: np.ndarray,
        fragments: np.ndarray,
        lengths: np.ndarray,
        per_chunk: int,
        crcs: np.ndarray | None = None,
    ) -> tuple[int, int, int, np.ndarray]:
        """This receive's rows in one native call (:data:`sdr.placement.mark_arrivals_native`):
        (new, duplicates, immediate-only, completed chunks), the effects of the Python
        paths of :class:`RecvTable`; with ``crcs``, each new packet's checksum is kept."""
        sums = None if crcs is None else self.bitmap.keep_sums()
        return placement.mark_arrivals_native(
            *self.bitmap.arrays(), self._have, self._fragments, packets,
            fragments.astype(np.uint32, copy=False), lengths, per_chunk,
            None if crcs is None else np.ascontiguousarray(crcs, dtype=np.int64), sums,
        )  # fmt: skip

    def _take_fragments(self, index: np.ndarray, values: np.ndarray) -> None:
        fresh = ~self._have[index]
        if fresh.any():
            index, values = index[fresh], values[fresh]
            # the first arrival of a fragment wins; later copies are duplicates
            first = np.unique(index, return_index=True)[1]
            self._fragments[index[first]] = values[first]
            self._have[index[first]] = True


SMALL_BATCH = 48
"""Batches up to this many rows are applied row by row."""


class RecvTable:
    """All receives of one QP, keyed by message id."""

    def __init__(self, attr: QPAttr, counters: QPCounters) -> None:
        self.attr = attr
        self.counters = counters
        self._slot_holder: list[RecvRecord | None] = [None] * attr.max_messages
        self._active: dict[int, RecvRecord] = {}
        self._next_seq = 0
        # per message id: the active receive's generation (-1: none), slot and length,
        # so a batch is matched to its receives with array lookups
        ids = attr.layout.max_message_ids
        self._id_gen = np.full(ids, -1, dtype=np.int64)
        self._id_slot = np.zeros(ids, dtype=np.int64)
        self._id_len = np.zeros(ids, dtype=np.int64)

    @property
    def active(self) -> int:
        return len(self._active)

    def records(self) -> list[RecvRecord]:
        return list(self._active.values())

    def post(
        self, region: MemoryRegion, offset: int, length: int | None, cts_copies: int = 1
    ) -> tuple[RecvRecord, list[Action]]:
        """Post the next receive; returns its record and the actions (bind, CTS; the CTS
        ``cts_copies`` times, back to back: the sender keeps the first)."""
        length = region.check_range(offset, length)
        if length > self.attr.max_message_size:
            raise ConfigError(
                f"receive of {length} bytes exceeds max_message_size "
                f"{self.attr.max_message_size}; raise QPAttr.max_message_size"
            )
        seq = self._next_seq
        msg_id, slot, generation = receive_triple(self.attr, seq)
        if msg_id in self._active:
            raise ResourceBusy(
                f"message id {msg_id} is still held by receive seq "
                f"{self._active[msg_id].seq}; complete it before posting more"
            )
        holder = self._slot_holder[slot]
        if holder is not None:
            raise ResourceBusy(
                f"receive slot {slot} is still held by receive seq {holder.seq} (slots are "
                f"used in turn, {self.attr.max_messages} of them); complete it first"
            )
        rec = RecvRecord(
            self._next_seq, msg_id, slot, generation, region, offset, length, self.attr
        )
        self._active[msg_id] = rec
        self._slot_holder[slot] = rec
        self._id_gen[msg_id], self._id_slot[msg_id], self._id_len[msg_id] = generation, slot, length
        self._next_seq += 1
        self.counters.cts_sent += 1
        cts = SendControl(CTS(rec.seq, msg_id, slot, generation, length).encode())
        return rec, [
            Bind(
                generation=generation,
                slot=slot,
                region=region,
                offset=offset,
                length=length,
                msg_id=msg_id,
            ),
            *[cts] * max(1, cts_copies),
        ]

    def complete(self, rec: RecvRecord) -> list[Action]:
        """Finish a receive (early or not): unbind its slot and free it."""
        if rec.state is RecvState.COMPLETED:
            return []
        rec.state = RecvState.COMPLETED
        del self._active[rec.msg_id]
        self._id_gen[rec.msg_id] = -1
        self._slot_holder[rec.slot] = None
        if rec.arrived:
            self.counters.messages_received += 1
        return [Unbind(rec.generation, rec.slot)]

    def seal(self, rec: RecvRecord, chunks: np.ndarray) -> list[Action]:
        """The layer above verified these chunks: the driver must refuse their packets."""
        if rec.state is RecvState.COMPLETED:
            return []
        # one action per run of consecutive chunks: a round verifies a dozen or more
        # chunks in order, and each action costs the driver a Python call
        return [Seal(rec.generation, rec.slot, a, b) for a, b in rec.bitmap.packet_runs(chunks)]

    def reopen(self, rec: RecvRecord, chunks: np.ndarray) -> list[Action]:
        """These chunks failed a check: forget their packets and let the driver place new
        copies (the repair). Their bitmap bits clear and set again when the repair lands."""
        if rec.state is RecvState.COMPLETED:
            return []
        ranges = rec.bitmap.packet_range(chunks)
        rec.bitmap.clear(chunks)
        self.counters.chunks_reopened += len(ranges)
        return [Reopen(rec.generation, rec.slot, a, b) for a, b in ranges]

    def on_completions(self, batch: CompletionBatch) -> dict[RecvRecord, np.ndarray]:
        """Apply a batch of packet completions; returns the chunks each batch completed.

        The result maps every receive that an accepted packet of this batch reached to
        the indices (int64, ascending) of its chunks that became complete with this batch:
        the event the layer above consumes instead of diffing bitmaps. A chunk reopened
        (:meth:`reopen`) and repaired is reported again when it completes again.

        Rows are matched to receives by message id and generation (``late`` and
        ``stale_generation`` otherwise). A batch a driver placed through
        :mod:`sdr.placement` (``batch.validated``) was checked against the key table this
        core bound, so only its slot is matched (a row placed through an older binding
        of the same id and generation is ``late``); any other batch (verbs, tests) is
        checked here against each receive's binding by the same rules
        (:func:`sdr.placement.check_packets`). Small batches are applied row by row
        (NumPy's per-call overhead dominates there), large ones vectorized; both apply
        the same rules (tested for equality).
        """
        if not len(batch):
            return {}
        attr, c = self.attr, self.counters
        ids, packets, fragments = attr.layout.decode_many(batch.imms)
        ids = ids.astype(np.int64)
        packets = packets.astype(np.int64)
        have = self._id_gen[ids]
        late = have < 0
        stale = ~late & (batch.generations.astype(np.int64) != have)
        lengths = batch.byte_lens.astype(np.int64, copy=False)
        remote = batch.remote_offsets.astype(np.int64, copy=False)
        ok = ~(late | stale)
        if batch.validated:  # placed against this core's key table: match the slot only
            late |= ok & (remote // attr.max_message_size != self._id_slot[ids])
            rows = np.flatnonzero(~(late | stale))
            if len(rows) < len(batch):  # (stale rows were never late)
                c.late += int(late.sum())
                c.stale_generation += int(stale.sum())
        else:
            slot_base = self._id_slot[ids] * attr.max_message_size
            within = np.where(remote >= 0, remote - slot_base, packets * attr.mtu)
            bad = check_packets(attr.layout, attr.mtu, packets, within, lengths, self._id_len[ids])
            bad[~ok] = PLACED
            c.late += int(late.sum())
            c.stale_generation += int((~late & stale).sum())
            if bad.any():
                c.malformed += int((bad == MALFORMED).sum())
                c.out_of_range += int((bad == OUT_OF_RANGE).sum())
            rows = np.flatnonzero(~late & ~stale & (bad == PLACED))
        if not len(rows):
            return {}
        crcs = batch.crcs
        if placement.DATAPATH == "native" and placement.mark_arrivals_native is not None:
            return self._apply_native(rows, ids, packets, fragments, lengths, crcs)
        if len(rows) <= SMALL_BATCH:
            return self._apply_rows(rows, ids, packets, fragments, lengths, crcs)
        return self._apply(rows, ids, packets, fragments, lengths, crcs)

    def _apply_native(
        self,
        rows: np.ndarray,
        ids: np.ndarray,
        packets: np.ndarray,
        fragments: np.ndarray,
        lengths: np.ndarray,
        crcs: np.ndarray | None = None,
    ) -> dict[RecvRecord, np.ndarray]:
        """:meth:`_apply` in one native call per receive (sdr._placement.mark_arrivals):
        same effects, same counters, same events (tests/test_recv_table_native.py)."""
        c, ppc = self.counters, self.attr.packets_per_chunk
        at = ids[rows]
        groups = [rows] if (at == at[0]).all() else [rows[at == i] for i in np.unique(at)]
        events: dict[RecvRecord, np.ndarray] = {}
        for mine in groups:
            rec = self._active[int(ids[mine[0]])]
            new, dup, imm_only, done = rec.mark_native(
                packets[mine], fragments[mine], lengths[mine], ppc,
                None if crcs is None else crcs[mine],
            )  # fmt: skip
            c.packets_accepted += new
            c.duplicates += dup
            c.imm_only_packets += imm_only
            events[rec] = done
        return events

    def _apply(
        self,
        rows: np.ndarray,
        ids: np.ndarray,
        packets: np.ndarray,
        fragments: np.ndarray,
        lengths: np.ndarray,
        crcs: np.ndarray | None = None,
    ) -> dict[RecvRecord, np.ndarray]:
        """Accepted rows, vectorized per receive."""
        c, n_frag = self.counters, self.attr.layout.fragments
        events: dict[RecvRecord, np.ndarray] = {}
        for msg_id in np.unique(ids[rows]).tolist():
            mine = rows[ids[rows] == msg_id]
            rec = self._active[msg_id]
            pkt = packets[mine]
            data = lengths[mine] > 0
            c.imm_only_packets += int((~data).sum())
            done = np.empty(0, dtype=np.int64)
            if crcs is not None:
                rec.bitmap.keep_sums()
            if data.any():
                sums = None if crcs is None else crcs[mine][data]
                new, dup, done = rec.bitmap.mark(pkt[data], sums)
                c.packets_accepted += new
                c.duplicates += dup
            rec._take_fragments(pkt % n_frag, fragments[mine])
            events[rec] = done.astype(np.int64, copy=False)
        return events

    def _apply_rows(
        self,
        rows: np.ndarray,
        ids: np.ndarray,
        packets: np.ndarray,
        fragments: np.ndarray,
        lengths: np.ndarray,
        crcs: np.ndarray | None = None,
    ) -> dict[RecvRecord, np.ndarray]:
        """The per-row twin of :meth:`_apply`: same effects, same counters, same events."""
        c, active = self.counters, self._active
        n_frag, ppc = self.attr.layout.fragments, self.attr.packets_per_chunk
        done: dict[RecvRecord, list[int]] = {}
        sums = [-1] * len(rows) if crcs is None else crcs[rows].tolist()
        for msg_id, pkt, fragment, length, crc in zip(
            ids[rows].tolist(),
            packets[rows].tolist(),
            fragments[rows].tolist(),
            lengths[rows].tolist(),
            sums,
            strict=True,
        ):
            rec = active[msg_id]
            chunks = done.setdefault(rec, [])
            bitmap = rec.bitmap
            if crcs is not None:
                bitmap.keep_sums()
            if length == 0:
                c.imm_only_packets += 1
                rec.take_fragment(pkt, fragment)
                continue
            if bitmap.mark_one(pkt, crc):
                c.packets_accepted += 1
                chunk = pkt // ppc
                if bitmap.chunks[chunk]:
                    chunks.append(chunk)  # its last packet: the chunk completed just now
            else:
                c.duplicates += 1
            rec.take_fragment(pkt % n_frag, fragment)
        return {rec: np.array(sorted(v), dtype=np.int64) for rec, v in done.items()}
