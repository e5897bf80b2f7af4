"""The receive side of an SDR QP: message slots, order-based matching, generations, CTS.

The n-th posted receive matches the n-th message the peer sends. Receive n takes message
id n mod 2^id_bits, slot n mod max_messages and generation (n div max_messages) mod
generations (:func:`sdr.id_reuse.receive_triple`), so the triple that a packet must match
repeats only every :func:`sdr.id_reuse.reuse_period` receives (130,048 with the default
attributes): a straggler of an earlier message cannot land in a later one unless it
outlived that many messages (docs/reliability.md, "Stragglers"). Posting binds the
key-table entry and sends a CTS. Packet
completions are validated (message id, generation, offset, length) before they touch the
bitmap; anything that fails is counted, never marked. Completing a receive unbinds its
slot, so later packets of that message are discarded by the driver (late-packet guard).
"""

from __future__ import annotations

import enum

import numpy as np

from sdr.actions import Action, Bind, Reopen, Seal, SendControl, Unbind
from sdr.chunk_bitmap import ReceiveBitmap
from sdr.config import QPAttr
from sdr.control import CTS
from sdr.counters import QPCounters
from sdr.errors import ConfigError, ResourceBusy
from sdr.id_reuse import receive_triple
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

    @property
    def active(self) -> int:
        return len(self._active)

    def records(self) -> list[RecvRecord]:
        return list(self._active.values())

    def post(
        self, region: MemoryRegion, offset: int, length: int | None
    ) -> tuple[RecvRecord, list[Action]]:
        """Post the next receive; returns its record and the actions (bind, CTS)."""
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
        self._next_seq += 1
        self.counters.cts_sent += 1
        cts = CTS(rec.seq, msg_id, slot, generation, length)
        return rec, [
            Bind(generation, slot, region, offset, length, msg_id),
            SendControl(cts.encode()),
        ]

    def complete(self, rec: RecvRecord) -> list[Action]:
        """Finish a receive (early or not): unbind its slot and free it."""
        if rec.state is RecvState.COMPLETED:
            return []
        rec.state = RecvState.COMPLETED
        del self._active[rec.msg_id]
        self._slot_holder[rec.slot] = None
        if rec.arrived:
            self.counters.messages_received += 1
        return [Unbind(rec.generation, rec.slot)]

    def seal(self, rec: RecvRecord, chunks: np.ndarray) -> list[Action]:
        """The layer above verified these chunks: the driver must refuse their packets."""
        if rec.state is RecvState.COMPLETED:
            return []
        return [Seal(rec.generation, rec.slot, a, b) for a, b in rec.bitmap.packet_range(chunks)]

    def reopen(self, rec: RecvRecord, chunks: np.ndarray) -> list[Action]:
        """These chunks failed a check: forget their packets and let the driver place new
        copies (the repair). Their bitmap bits clear and set again when the repair lands."""
        if rec.state is RecvState.COMPLETED:
            return []
        ranges = rec.bitmap.packet_range(chunks)
        rec.bitmap.clear(chunks)
        self.counters.chunks_reopened += len(ranges)
        return [Reopen(rec.generation, rec.slot, a, b) for a, b in ranges]

    def on_completions(self, batch: CompletionBatch) -> set[RecvRecord]:
        """Validate and apply a batch of packet completions; returns the receives touched.

        Small batches take a per-row path (NumPy's per-call overhead dominates there),
        large ones a vectorized path; both apply the same rules (tested for equality).
        """
        touched: set[RecvRecord] = set()
        if not len(batch):
            return touched
        if len(batch) <= SMALL_BATCH:
            return self._apply_rows(batch)
        layout = self.attr.layout
        ids, packets, fragments = layout.decode_many(batch.imms)
        for msg_id in np.unique(ids).tolist():
            rows = np.flatnonzero(ids == msg_id)
            rec = self._active.get(msg_id)
            if rec is None:
                self.counters.late += len(rows)
                continue
            good_gen = batch.generations[rows] == rec.generation
            self.counters.stale_generation += int((~good_gen).sum())
            rows = rows[good_gen]
            if len(rows):
                self._apply(rec, rows, batch, packets, fragments)
                touched.add(rec)
        return touched

    def _apply(
        self,
        rec: RecvRecord,
        rows: np.ndarray,
        batch: CompletionBatch,
        packets: np.ndarray,
        fragments: np.ndarray,
    ) -> None:
        layout, attr, c = self.attr.layout, self.attr, self.counters
        pkt = packets[rows].astype(np.int64)
        byte_len = batch.byte_lens[rows]
        remote = batch.remote_offsets[rows]
        imm_only = byte_len == 0
        in_range = pkt < rec.bitmap.n_packets
        expected = np.where(in_range, rec.bitmap.expected_lengths(np.where(in_range, pkt, 0)), -1)
        offset_ok = (remote < 0) | (remote == rec.slot * attr.max_message_size + pkt * attr.mtu)
        data_ok = ~imm_only & in_range & (byte_len == expected) & offset_ok
        imm_ok = imm_only & (pkt < layout.fragments)
        c.out_of_range += int((~imm_only & ~in_range).sum())
        c.malformed += int((~imm_only & in_range & ~data_ok).sum() + (imm_only & ~imm_ok).sum())
        c.imm_only_packets += int(imm_ok.sum())
        if data_ok.any():
            new, dup, _ = rec.bitmap.mark(pkt[data_ok])
            c.packets_accepted += new
            c.duplicates += dup
        carrier = data_ok | imm_ok
        if carrier.any():
            rec._take_fragments(pkt[carrier] % layout.fragments, fragments[rows][carrier])

    def _apply_rows(self, batch: CompletionBatch) -> set[RecvRecord]:
        """The per-row twin of the vectorized path: same checks, same counters."""
        attr, c, active = self.attr, self.counters, self._active
        layout = attr.layout
        id_shift, user_bits = layout.offset_bits + layout.user_bits, layout.user_bits
        offset_mask, user_mask = layout.max_packets - 1, (1 << layout.user_bits) - 1
        n_frag, mtu, slot_size = layout.fragments, attr.mtu, attr.max_message_size
        touched: set[RecvRecord] = set()
        for imm, gen, length, remote in zip(
            batch.imms.tolist(),
            batch.generations.tolist(),
            batch.byte_lens.tolist(),
            batch.remote_offsets.tolist(),
            strict=True,
        ):
            rec = active.get(imm >> id_shift)
            if rec is None:
                c.late += 1
                continue
            if gen != rec.generation:
                c.stale_generation += 1
                continue
            touched.add(rec)
            pkt = (imm >> user_bits) & offset_mask
            if length == 0:
                if pkt < n_frag:
                    c.imm_only_packets += 1
                    rec.take_fragment(pkt, imm & user_mask)
                else:
                    c.malformed += 1
                continue
            bitmap = rec.bitmap
            if pkt >= bitmap.n_packets:
                c.out_of_range += 1
                continue
            start = pkt * mtu
            if length != min(mtu, rec.length - start) or (
                remote >= 0 and remote != rec.slot * slot_size + start
            ):
                c.malformed += 1
                continue
            if bitmap.mark_one(pkt):
                c.packets_accepted += 1
            else:
                c.duplicates += 1
            rec.take_fragment(pkt % n_frag, imm & user_mask)
        return touched
