"""Erasure Coding schemes: ``ec-mds`` (Reed-Solomon via ISA-L) and ``ec-xor``, with SR repair.

A message of M data chunks is split into L = ceil(M/k) submessages of k data chunks (the
last may hold fewer), each protected by m parity chunks. Data travels in lane 0 straight
from the user's buffer into the receiver's; parity travels in lane 1, a second SDR stream
into a parity buffer the receiver's scheme owns (chunk j of submessage s at parity chunk
s*m + j). A second lane, rather than a region after the data, keeps the data zero-copy:
the user's receive buffer need not be larger than the message. The sender queues all data
at once and encodes one submessage per work step, so encoding overlaps sending.

The receiver arms FTO = (M + L*m) * T_INJ + beta * rtt at the first chunk (data or
parity), and lets it expire only once no chunk arrived for beta * rtt (a sender slower
than link_rate is still sending, not lost). Once every submessage is recoverable it
decodes the missing data into place, checks every chunk's CRC-32 and sends the positive
ACK. When FTO expires first it sends an
EC_NACK listing, per failed submessage, the missing data chunks; those are repaired with
Selective Repeat (RTO armed on the retransmissions, SACKs from then on). A PROBE from the
sender (it finished sending and waited one RTO) counts as FTO expiry unless chunks are
still arriving.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sdr.codecs import get_codec
from sdr.reliability.base import Lane, Scheme, SchemeReceiver, SchemeSender, earliest
from sdr.reliability.config import ReliabilityConfig
from sdr.reliability.messages import ControlMessage, EcNack, Sack
from sdr.reliability.sr_receiver import SelectiveRepeatReceiver
from sdr.reliability.sr_sender import SelectiveRepeatSender

__all__ = ["ErasureCoding", "ErasureCodingMDS", "ErasureCodingXOR"]


def _chunk_views(buf: memoryview | np.ndarray, bounds: list[tuple[int, int]]) -> list[np.ndarray]:
    arr = np.frombuffer(buf, dtype=np.uint8) if isinstance(buf, memoryview) else buf
    return [arr[a:b] for a, b in bounds]


class ErasureCodingSender(SelectiveRepeatSender):
    """EC sender: data, then parity as it is encoded; SR for chunks the receiver NACKs."""

    arm_first_send: ClassVar[bool] = False

    def __init__(self, scheme: Scheme, seq: int, data: memoryview) -> None:
        super().__init__(scheme, seq, data)
        cfg = self.config
        self.k, self.m = cfg.k, cfg.m
        self.n_subs = self.geometry.submessages(self.k)
        self.parity = np.zeros(self.n_subs * self.m * self.scheme.chunk_size, dtype=np.uint8)
        self._next_sub = 0

    def lane_buffer(self, lane: int) -> np.ndarray | None:
        return self.parity if lane == Lane.PARITY else None

    def on_control(self, now: float, message: ControlMessage) -> None:
        """As SR, except that an EC_NACK for submessages of another k is ignored (its flags
        name other chunks than the receiver meant; a forged one must not cost a resend)."""
        if isinstance(message, EcNack) and message.k != self.k:
            if self.active:
                self.count("ignored_control")
            return
        super().on_control(now, message)

    def has_work(self) -> bool:
        return super().has_work() or (self.active and self.started and self._next_sub < self.n_subs)

    def do_work(self, now: float) -> None:
        if not self.digest.done:
            super().do_work(now)
        if self._next_sub < self.n_subs:
            self.encode(self._next_sub)
            self._next_sub += 1

    def encode(self, sub: int) -> None:
        """Compute submessage ``sub``'s parity into the parity lane and queue it."""
        k, m, cs, g = self.k, self.m, self.scheme.chunk_size, self.geometry
        chunks = range(sub * k, min(sub * k + k, g.n_chunks))
        data = _chunk_views(self.data, [g.bounds(c) for c in chunks])
        out = _chunk_views(
            self.parity, [((sub * m + j) * cs, (sub * m + j + 1) * cs) for j in range(m)]
        )
        self.scheme.codec.encode(data, out)  # type: ignore[attr-defined]
        self.count("submessages_encoded")
        self.queue_chunks(Lane.PARITY, np.arange(sub * m, sub * m + m, dtype=np.int64))


class ErasureCodingReceiver(SelectiveRepeatReceiver):
    """EC receiver: decode when all submessages are recoverable, else EC_NACK after FTO."""

    def __init__(self, scheme: Scheme, seq: int, data: memoryview) -> None:
        super().__init__(scheme, seq, data)
        cfg = self.config
        self.k, self.m = cfg.k, cfg.m
        self.codec = scheme.codec  # type: ignore[attr-defined]
        self.n_subs = self.geometry.submessages(self.k)
        self.parity = np.zeros(self.n_subs * self.m * scheme.chunk_size, dtype=np.uint8)
        self.parity_arrived = np.zeros(self.n_subs * self.m, dtype=bool)
        self.recovered = np.zeros(self.n_chunks, dtype=bool)
        self.recoverable = np.zeros(self.n_subs, dtype=bool)
        self.fallback = False
        self._fto_at: float | None = None
        self._last_arrival = -np.inf
        self._dirty: set[int] = set(range(self.n_subs))
        self._todo: list[int] | None = None
        self._poisoned: set[int] = set()
        """Submessages whose last decode rebuilt a chunk that failed its checksum (a
        damaged parity or data copy): not decoded again until a new chunk of theirs lands."""
        self._last_digest_request = -np.inf

    def lane_buffer(self, lane: int) -> np.ndarray | None:
        return self.parity if lane == Lane.PARITY else None

    def landed(self) -> np.ndarray:
        return self.arrived | self.recovered

    def placed_sums(self, chunks: np.ndarray) -> np.ndarray | None:
        sums = super().placed_sums(chunks)
        if sums is not None:
            sums[self.recovered[chunks]] = -1  # rebuilt here, not placed: read them
        return sums

    # --- events -------------------------------------------------------------------------
    def arm_fto(self, now: float) -> None:
        self._last_arrival = now
        if self._fto_at is None and not self.fallback:
            self._fto_at = now + self.config.fto(self.n_chunks, self.n_subs * self.m)

    def fto_deadline(self) -> float | None:
        """FTO from the first chunk, but never while chunks still flow: a sender slower
        than link_rate (CPU, a shared link) must not be NACKed while it is still sending."""
        if self._fto_at is None:
            return None
        return max(self._fto_at, self._last_arrival + self.config.beta_value * self.config.rtt)

    def after_data(self, now: float, chunks: np.ndarray) -> None:
        self.arm_fto(now)
        self.touch(chunks // self.k, landed=True)
        if self.fallback:
            super().after_data(now, chunks)

    def on_lane(self, now: float, lane: int, chunks: np.ndarray) -> None:
        if lane != Lane.PARITY:
            super().on_lane(now, lane, chunks)
            return
        chunks = chunks[chunks < len(self.parity_arrived)]
        self.parity_arrived[chunks] = True
        self.count("parity_arrived", len(chunks))
        self.arm_fto(now)
        self.touch(chunks // self.m, landed=True)

    def on_bad(self, now: float, chunks: np.ndarray) -> None:
        self.touch(chunks // self.k)
        super().on_bad(now, chunks)

    def report(self, now: float) -> None:
        if self.fallback:
            self.ec_nack(now)
        elif now >= self._last_arrival + self.config.beta_value * self.config.rtt:
            self.fto_expired(now)  # the sender finished and waited, nothing flows: repair now
        super().report(now)

    # --- timers -------------------------------------------------------------------------
    def next_timer(self) -> float | None:
        if not self.active:
            return None
        return earliest(super().next_timer(), self.fto_deadline())

    def handle_timer(self, now: float) -> None:
        super().handle_timer(now)
        deadline = self.fto_deadline()
        if self.active and deadline is not None and now >= deadline:
            self.fto_expired(now)

    def fto_expired(self, now: float) -> None:
        """Fall back to SR: NACK the submessages that cannot be decoded (if any)."""
        self._fto_at = None
        self.refresh()
        if self.recoverable.all():
            return  # decoding (or the checksums) is all that is missing
        if not self.fallback:
            self.fallback = True
            self.count("fallbacks")
            self._todo = None
        self.ec_nack(now)

    def ec_nack(self, now: float) -> None:
        self.refresh()
        failed = np.flatnonzero(~self.recoverable)
        if not len(failed):
            return
        have, k = self.have(), self.k
        missing = {int(s): ~have[s * k : min(s * k + k, self.n_chunks)] for s in failed}
        for message in EcNack.build(self.seq, k, missing, self.digests.complete):
            self.send(message)
        self.last_nack[EcNack(self.seq, k, missing).chunks()] = now
        self.count("failed_submessages", len(failed))

    # --- decoding -----------------------------------------------------------------------
    def touch(self, subs: np.ndarray, landed: bool = False) -> None:
        """Submessages whose chunks changed; ``landed``: a new chunk of theirs arrived."""
        fresh = np.unique(subs).tolist()
        self._dirty.update(fresh)
        if landed:
            self._poisoned.difference_update(fresh)
        self._todo = None

    def refresh(self) -> None:
        """Recompute recoverability of submessages whose chunks changed."""
        if not self._dirty:
            return
        have, k, m = self.have(), self.k, self.m
        for s in self._dirty:
            present = np.concatenate(
                [
                    have[s * k : min(s * k + k, self.n_chunks)],
                    self.parity_arrived[s * m : s * m + m],
                ]
            )
            self.recoverable[s] = self.codec.can_recover(present)
        self._dirty.clear()

    def decodable(self) -> list[int]:
        """Submessages to decode now: recoverable, missing data, and (all recoverable or
        fallback) so chunks merely in flight are not decoded needlessly."""
        if self._todo is None:
            self.refresh()
            self._todo = []
            if self.fallback or self.recoverable.all():
                have, k = self.have(), self.k
                self._todo = [
                    int(s)
                    for s in np.flatnonzero(self.recoverable)
                    if not have[s * k : min(s * k + k, self.n_chunks)].all()
                    and int(s) not in self._poisoned
                ]
        return self._todo

    def has_work(self) -> bool:
        return self.active and bool(self.decodable())

    def do_work(self, now: float) -> None:
        todo = self.decodable()
        if todo:
            self.decode(now, todo.pop(0))

    def decode(self, now: float, sub: int) -> None:
        """Rebuild the missing data chunks of ``sub`` in place and verify them."""
        k, m, cs, g = self.k, self.m, self.scheme.chunk_size, self.geometry
        first, stop = sub * k, min(sub * k + k, self.n_chunks)
        have = self.have()
        data = _chunk_views(self.data, [g.bounds(c) for c in range(first, stop)])
        parity = _chunk_views(
            self.parity, [((sub * m + j) * cs, (sub * m + j + 1) * cs) for j in range(m)]
        )
        present = np.concatenate([have[first:stop], self.parity_arrived[sub * m : sub * m + m]])
        rebuilt = first + np.array(
            self.codec.decode([*data, *parity], present.tolist()), dtype=np.int64
        )
        self.recovered[rebuilt] = True
        self.count("chunks_decoded", len(rebuilt))
        self.count("submessages_decoded")
        self.verify(now, rebuilt)
        if self.bad[rebuilt].any():
            self._poisoned.add(sub)  # decoding again from the same inputs cannot help
        self.touch(np.array([sub]))
        self.check_done(now)

    def check_done(self, now: float) -> None:
        super().check_done(now)
        if not self.active or self.digests.complete:
            return
        self.refresh()
        if self.recoverable.all() and now - self._last_digest_request >= self.config.rtt:
            self._last_digest_request = now
            self.send(Sack.build(self.seq, self.have(), digest_ok=False))


class ErasureCoding(Scheme):
    """Erasure Coding with SR fallback; ``codec_name`` picks the code (sdr.codecs)."""

    sender_class = ErasureCodingSender
    receiver_class = ErasureCodingReceiver
    acks_progressively = False  # one ACK per message: a window would stall it
    codec_name: ClassVar[str] = "mds"

    def __init__(self, config: ReliabilityConfig) -> None:
        super().__init__(config)
        self.codec = get_codec(self.codec_name, config.k, config.m, self.chunk_size)

    def describe(self) -> str:
        c = self.config
        return f"{self.name} codec={self.codec_name} k={c.k} m={c.m} chunk_size={c.chunk_size}"

    def as_selective_repeat(self, length: int) -> bool:
        """A message of at most one chunk goes as Selective Repeat, with an empty parity
        lane: m parity chunks of a whole chunk each would carry a few bytes (a deadline
        allreduce's note, a flag) m times over, after an encode on the sending path
        (0.4-0.6 ms of the note's latency in the DiLoCo example); ``small_copies`` is its
        repetition code instead. Both ends decide it from the length alone."""
        return length <= self.chunk_size

    def lanes(self, length: int) -> tuple[int, ...]:
        if self.as_selective_repeat(length):
            return (length, 0)
        chunks = -(-length // self.chunk_size)
        subs = -(-chunks // self.config.k)
        return (length, subs * self.config.m * self.chunk_size)

    def sender(self, seq: int, data: memoryview) -> SchemeSender:
        if self.as_selective_repeat(len(data)):
            return SelectiveRepeatSender(self, seq, data)
        return super().sender(seq, data)

    def receiver(self, seq: int, data: memoryview) -> SchemeReceiver:
        if self.as_selective_repeat(len(data)):
            return SelectiveRepeatReceiver(self, seq, data)
        return super().receiver(seq, data)


class ErasureCodingMDS(ErasureCoding):
    """``ec-mds``: Reed-Solomon through pyeclib's ISA-L backend; any m of k+m may be lost."""

    codec_name: ClassVar[str] = "mds"


class ErasureCodingXOR(ErasureCoding):
    """``ec-xor``: parity i = XOR of data chunks j with j % m == i; one loss per group."""

    codec_name: ClassVar[str] = "xor"
