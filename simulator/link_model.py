"""The link, defined once: what one direction of a long-haul link does to packets.

:class:`LinkSpec` describes a direction (rate, one-way delay, drop-tail queue, loss model,
reordering, duplication, corruption, blackouts, seed); :class:`LinkDirection` is its state
machine. Packets are *offered* with the times they reach the link, as arrays, and the
direction decides for each: dropped (by which cause) or delivered at what time, duplicated
or not, corrupted or not. It reads no clock and does no I/O, so the discrete-event
simulator (:mod:`sdr.simulator.des_link`) schedules it on simulated time and the WAN
emulator's forwarder (``sdr.backends.wan``) applies it to real packets on the wall clock.

The queue is computed, not stepped: a FIFO single server finishes packet ``i`` at
``max(arrival_i, finish_{i-1}) + size_i / rate``, so a batch takes a few NumPy operations
(a per-packet loop only when the queue overflows). Every kind of random draw has its own
stream, spawned from the seed, and draws once per offered packet (per delivered packet for
reordering, duplication and corruption), so the decisions do not depend on how the packets
are split into batches: a simulator carrying one propagation delay's worth at a time and an
emulator carrying one socket read at a time decide the same for the same packets.
"""

from __future__ import annotations

import copy

import numpy as np

from sdr.simulator.link_decisions import (
    BLACKOUT,
    CAUSES,
    DELIVERED,
    LOSS,
    QUEUE,
    Decisions,
    LinkStats,
    Verdict,
    flip_bit,
)
from sdr.simulator.link_spec import LinkSpec
from sdr.simulator.loss import Bernoulli, LossModel, draw_losses

__all__ = [
    "BLACKOUT",
    "CAUSES",
    "DELIVERED",
    "LOSS",
    "QUEUE",
    "Decisions",
    "LinkDirection",
    "LinkSpec",
    "LinkStats",
    "Verdict",
    "flip_bit",
]

_QUEUE_SLACK_BYTES = 1e-6  # the backlog is computed from times: tolerate float rounding


class LinkDirection:
    """The state of one direction: when the wire is free, the loss models' states and the
    random streams. Feed it packets with :meth:`offer` (arrays) or :meth:`admit` (one).

    ``rng``: a generator to spawn the random streams from instead of ``spec.seed`` (a
    simulator that derives every direction's seed from one run seed).
    """

    def __init__(self, spec: LinkSpec, rng: np.random.Generator | None = None) -> None:
        self.spec = spec
        self.rate = float(spec.rate)
        self.one_way_delay = spec.one_way_delay
        self.queue = float(spec.queue)
        # each direction owns its loss models' state (one spec may serve both directions)
        self.loss = copy.deepcopy(spec.loss)
        self.control_loss = copy.deepcopy(spec.control_loss)
        gen = rng if rng is not None else np.random.default_rng(spec.seed)
        (
            self._loss_rng,
            self._control_rng,
            self._reorder_rng,
            self._jitter_rng,
            self._duplicate_rng,
            self._corrupt_rng,
            self._where_rng,
        ) = gen.spawn(7)
        self.last_finish = 0.0
        """When the wire is free: the last accepted packet's serialization ends."""
        self._start: float | None = None
        self.stats = LinkStats()

    def queued_bytes(self, now: float) -> float:
        """Bytes waiting for the wire at ``now``."""
        return max(0.0, self.last_finish - now) * self.rate / 8

    def admit(self, now: float, size: int) -> Verdict:
        """One packet of ``size`` bytes enters the link at ``now`` (see :meth:`offer`)."""
        cause, arrive, dup, bad, _, _ = self._one(float(now), float(size), False)
        if cause:
            return Verdict((), reason=CAUSES[cause])
        return Verdict((arrive,) if dup != dup else (arrive, dup), bad)

    def offer(
        self, starts: np.ndarray, sizes: np.ndarray, control: np.ndarray | bool = False
    ) -> Decisions:
        """Packets of ``sizes`` bytes reach the link at ``starts`` (seconds, ascending).

        ``control`` flags control messages (their own loss model). Every call continues
        the previous ones: ``starts`` must not go back before the last call's.
        """
        starts = np.asarray(starts, np.float64)
        sizes = np.asarray(sizes, np.float64)
        n = len(starts)
        ctl = np.broadcast_to(np.asarray(control, bool), (n,))
        if n == 0:
            return Decisions(np.empty(0), np.empty(0, np.uint8))
        if n == 1:
            return self._one_as_batch(float(starts[0]), float(sizes[0]), bool(ctl[0]))
        if self._start is None:
            self._start = float(starts[0])
        finish, backlog = self._queue(starts, sizes)
        st, spec = self.stats, self.spec
        cause = np.where(np.isnan(finish), QUEUE, DELIVERED).astype(np.uint8)
        if spec.blackouts:
            elapsed = starts - self._start
            dark = np.zeros(n, bool)
            for lo, hi in spec.blackouts:
                dark |= (lo <= elapsed) & (elapsed < hi)
            cause[dark & (cause == DELIVERED)] = BLACKOUT
        data = ~ctl
        lost = np.zeros(n, bool)
        if data.any():
            lost[data] = self._losses(self.loss, self._loss_rng, sizes[data])
        if ctl.any():
            lost[ctl] = self._losses(self.control_loss, self._control_rng, sizes[ctl])
        cause[lost & (cause == DELIVERED)] = LOSS
        ok = cause == DELIVERED
        arrive = np.where(ok, finish + self.one_way_delay, np.nan)
        if spec.reorder > 0:
            held = (self._reorder_rng.random(n) < spec.reorder) & ok
            k = int(held.sum())
            if k:
                extra: float | np.ndarray = spec.reorder_delay
                if spec.reorder_jitter:
                    extra = extra + self._jitter_rng.random(k) * spec.reorder_jitter
                arrive[held] += extra
                st.reordered += k
        out = Decisions(arrive, cause)
        if spec.duplicate > 0:
            twice = (self._duplicate_rng.random(n) < spec.duplicate) & ok
            dup = np.where(twice, arrive + sizes * (8.0 / self.rate), np.nan)
            st.duplicated += int(twice.sum())
            out = Decisions(arrive, cause, duplicate_at=dup)
        if spec.corrupt > 0:
            bad = (self._corrupt_rng.random(n) < spec.corrupt) & ok
            k = int(bad.sum())
            where, bit = np.zeros(n), np.zeros(n, np.uint8)
            draws = self._where_rng.random(2 * k)  # (where, bit) pairs, packet by packet
            where[bad] = draws[0::2]
            bit[bad] = np.minimum(draws[1::2] * 8, 7).astype(np.uint8)
            st.corrupted += k
            out = Decisions(arrive, cause, out.duplicate_at, bad, where, bit)
        st.max_backlog_bytes = max(st.max_backlog_bytes, float(backlog.max()))
        st.packets += int(data.sum())
        st.bytes += int(sizes[data].sum())
        st.control_packets += n - int(data.sum())
        st.queue_drops += int((cause == QUEUE).sum())
        st.blackout_drops += int((cause == BLACKOUT).sum())
        st.loss_drops += int((lost & data & (cause == LOSS)).sum())
        st.control_lost += int((lost & ctl & (cause == LOSS)).sum())
        st.delivered += int(ok.sum()) + (
            0 if out.duplicate_at is None else int((out.duplicate_at == out.duplicate_at).sum())
        )
        return out

    def _one(
        self, now: float, size: float, control: bool
    ) -> tuple[int, float, float, bool, float, int]:
        """:meth:`offer` for one packet without arrays (the per-packet path of a forwarder):
        the same streams, the same draws, the same decisions. Returns (cause, arrival,
        duplicate arrival or NaN, corrupt, where, bit)."""
        st, spec = self.stats, self.spec
        if self._start is None:
            self._start = now
        ser = size * (8.0 / self.rate)
        queued = max(self.last_finish - now, 0.0) * (self.rate / 8.0)
        st.max_backlog_bytes = max(st.max_backlog_bytes, queued)
        cause = DELIVERED
        if queued + size > self.queue + _QUEUE_SLACK_BYTES:
            cause = QUEUE
        else:
            self.last_finish = max(self.last_finish, now) + ser
        if cause == DELIVERED and spec.blackouts:
            elapsed = now - self._start
            if any(lo <= elapsed < hi for lo, hi in spec.blackouts):
                cause = BLACKOUT
        model, rng = (
            (self.control_loss, self._control_rng) if control else (self.loss, self._loss_rng)
        )
        lost = not (model is None or (isinstance(model, Bernoulli) and model.p == 0.0)) and bool(
            model.drop(rng, int(size))
        )
        if control:
            st.control_packets += 1
        else:
            st.packets += 1
            st.bytes += int(size)
        if lost and cause == DELIVERED:
            cause = LOSS
            if control:
                st.control_lost += 1
            else:
                st.loss_drops += 1
        st.queue_drops += cause == QUEUE
        st.blackout_drops += cause == BLACKOUT
        ok = cause == DELIVERED
        arrive = self.last_finish + self.one_way_delay if ok else float("nan")
        if spec.reorder > 0 and self._reorder_rng.random() < spec.reorder and ok:
            extra = spec.reorder_delay
            if spec.reorder_jitter:
                extra = extra + self._jitter_rng.random() * spec.reorder_jitter
            arrive += extra
            st.reordered += 1
        dup = float("nan")
        if spec.duplicate > 0 and self._duplicate_rng.random() < spec.duplicate and ok:
            dup = arrive + size * (8.0 / self.rate)
            st.duplicated += 1
        bad, where, bit = False, 0.0, 0
        if spec.corrupt > 0 and self._corrupt_rng.random() < spec.corrupt and ok:
            bad = True
            draws = self._where_rng.random(2)
            where, bit = float(draws[0]), min(int(draws[1] * 8), 7)
            st.corrupted += 1
        st.delivered += int(ok) + int(dup == dup)
        return cause, arrive, dup, bad, where, bit

    def _one_as_batch(self, now: float, size: float, control: bool) -> Decisions:
        cause, arrive, dup, bad, where, bit = self._one(now, size, control)
        spec = self.spec
        return Decisions(
            np.array([arrive]),
            np.array([cause], np.uint8),
            np.array([dup]) if spec.duplicate > 0 else None,
            np.array([bad]) if spec.corrupt > 0 else None,
            np.array([where]) if spec.corrupt > 0 else None,
            np.array([bit], np.uint8) if spec.corrupt > 0 else None,
        )

    def corrupt_bytes(self, packet: bytearray, skip: int = 0) -> None:
        """Flip one random bit past the first ``skip`` bytes (an undecided corruption)."""
        where, bit = self._where_rng.random(2).tolist()
        flip_bit(packet, skip, where, min(int(bit * 8), 7))

    # --- the queue ------------------------------------------------------------------------
    def _queue(self, starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Serialization finish of each packet (NaN: the queue was full) and the backlog
        (bytes) each found."""
        ser = sizes * (8.0 / self.rate)
        cum = np.cumsum(ser)
        # FIFO: finish_i = max(last, max_j<=i (start_j - cum_{j-1})) + cum_i
        base = np.maximum.accumulate(np.maximum(starts - (cum - ser), self.last_finish))
        finish = base + cum
        before = np.concatenate(([self.last_finish], finish[:-1]))
        backlog = np.maximum(before - starts, 0.0) * (self.rate / 8.0)
        if (backlog + sizes > self.queue + _QUEUE_SLACK_BYTES).any():
            return self._queue_overflowing(starts, sizes, ser)
        self.last_finish = float(finish[-1])
        return finish, backlog

    def _queue_overflowing(
        self, starts: np.ndarray, sizes: np.ndarray, ser: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Packet by packet: drop-tail when the backlog plus the packet exceeds the queue."""
        finish = np.full(len(starts), np.nan)
        backlog = np.zeros(len(starts))
        last, cap, bytes_per_s = self.last_finish, self.queue, self.rate / 8.0
        cap += _QUEUE_SLACK_BYTES
        for i, (s, size, t) in enumerate(
            zip(starts.tolist(), sizes.tolist(), ser.tolist(), strict=True)
        ):
            queued = max(last - s, 0.0) * bytes_per_s
            backlog[i] = queued
            if queued + size > cap:
                continue
            last = max(last, s) + t
            finish[i] = last
        self.last_finish = last
        return finish, backlog

    @staticmethod
    def _losses(model: LossModel | None, rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
        if model is None or (isinstance(model, Bernoulli) and model.p == 0.0):
            return np.zeros(len(sizes), bool)
        return draw_losses(model, rng, sizes)
