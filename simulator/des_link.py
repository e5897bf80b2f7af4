"""The link of the discrete-event simulation: NICs, a drop-tail switch queue, the long haul.

One :class:`LinkDirection` carries packets from one site to the other: every host NIC at
that site feeds one bottleneck switch queue (drop-tail, ``buffer_bytes``) that serializes
at the link rate; a packet then crosses the link in ``one_way_delay_s``, may be lost (a
loss model from :mod:`sdr.simulator.loss`, drawn once per packet; data and control packets
have separate models, so the ACK path can be lossy on its own) and may be held back by up
to ``reorder_delay_s`` (reordering).

The queue is computed, not stepped: a FIFO single server finishes packet ``i`` at
``max(arrival_i, finish_{i-1}) + size_i / rate``, so a batch of packets is carried with a
few NumPy operations (a per-packet loop only when the queue overflows) and every packet's
arrival time is known at once; the receiving host is woken for the arrivals it needs.
Several senders' packets are merged in time order before they enter the queue (see
:class:`LinkDirection`), so a shared link is exact, not an approximation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from sdr.errors import ConfigError
from sdr.simulator.link import Link
from sdr.simulator.loss import Bernoulli, LossModel

__all__ = ["PathImpairments", "Nic", "LinkDirection", "DirectionStats"]


@dataclass(frozen=True)
class PathImpairments:
    """What happens to packets in one direction of the link.

    Attributes:
        loss: loss model of data packets (None: lossless), drawn once per packet.
        control_loss: loss model of control messages (CTS, DIGEST, SACK, ACK, NACK ...).
        reorder: probability that a packet is held back (delayed, so later ones overtake).
        reorder_delay_s: a held-back packet is delayed by a uniform extra in
            ``[0, reorder_delay_s]`` seconds.
    """

    loss: LossModel | None = None
    control_loss: LossModel | None = None
    reorder: float = 0.0
    reorder_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.reorder <= 1.0:
            raise ConfigError(f"reorder must be a probability in [0, 1], got {self.reorder!r}")
        if self.reorder_delay_s < 0:
            raise ConfigError(f"reorder_delay_s must be >= 0 s, got {self.reorder_delay_s!r}")
        if self.reorder > 0 and self.reorder_delay_s == 0:
            raise ConfigError("reorder > 0 needs reorder_delay_s > 0 (how far packets are held)")


class Nic:
    """A host's transmitter: serializes at ``rate_bps`` and accepts ``horizon_s`` ahead.

    ``budget`` says how many packets fit before the transmitter is ``horizon_s`` ahead of
    ``now``; a sender that filled it is woken again when the transmitter drains
    (``free_at``). A packet's departure (as the sender's reliability layer sees it) is its
    post time, as with a real NIC's send queue.
    """

    def __init__(self, rate_bps: float, horizon_s: float) -> None:
        if not rate_bps > 0:
            raise ConfigError(f"NIC rate must be > 0 bit/s, got {rate_bps!r}")
        self.rate_bps = float(rate_bps)
        self.horizon_s = float(horizon_s)
        self.free_at = 0.0

    def budget(self, now: float, packet_bytes: int) -> int:
        """Packets of ``packet_bytes`` that may be posted at ``now``."""
        room = now + self.horizon_s - max(self.free_at, now)
        per_packet = packet_bytes * 8.0 / self.rate_bps
        return max(0, int(room / per_packet + 1e-9)) if per_packet > 0 else 1 << 16

    def reserve(self, now: float, sizes: np.ndarray) -> np.ndarray:
        """Queue packets of ``sizes`` bytes; returns when each starts on the wire."""
        ser = sizes * (8.0 / self.rate_bps)
        t0 = max(now, self.free_at)
        ends = t0 + np.cumsum(ser)
        self.free_at = float(ends[-1]) if len(ends) else self.free_at
        return ends - ser


@dataclass
class DirectionStats:
    """Packet counts of one direction (data and control together unless named)."""

    packets: int = 0
    bytes: int = 0
    queue_drops: int = 0
    lost: int = 0
    control_packets: int = 0
    control_lost: int = 0
    reordered: int = 0
    max_backlog_bytes: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)


Deliver = Callable[[int, int, np.ndarray], None]
"""Called with (first, stop, arrival times) for packets [first, stop) of a submission."""


class _Submission:
    __slots__ = ("starts", "sizes", "control", "deliver", "done")

    def __init__(self, starts: np.ndarray, sizes: np.ndarray, control: bool, deliver: Deliver):
        self.starts, self.sizes, self.control, self.deliver = starts, sizes, control, deliver
        self.done = 0


class LinkDirection:
    """One direction of the long-haul link: switch queue, serialization, delay, loss.

    Packets are *submitted* when a NIC posts them, with the time each reaches the switch,
    and *carried* later, all NICs' packets merged in time order: at ``s + one_way_delay``
    for the earliest pending start ``s`` every packet that starts by then is known (a NIC
    cannot post into the past), and none of them can land before that moment. So the
    FIFO is exact for any number of senders, and one pass carries a whole propagation
    delay's worth of packets.
    """

    def __init__(
        self,
        env: simpy.Environment,
        link: Link,
        impairments: PathImpairments,
        rng: np.random.Generator,
        *,
        buffer_bytes: float | None = None,
    ) -> None:
        self.env = env
        self.link = link
        self.impairments = impairments
        self.rng = rng
        self.rate_bps = float(link.bandwidth_bps)
        self.delay_s = link.one_way_delay_s
        self.buffer_bytes = float(link.buffer_bytes if buffer_bytes is None else buffer_bytes)
        if self.buffer_bytes <= 0:
            raise ConfigError(f"switch buffer must be > 0 bytes, got {buffer_bytes!r}")
        self.last_finish = 0.0
        self.stats = DirectionStats()
        self._pending: list[_Submission] = []
        self._tick: float | None = None

    # --- submission and merged processing ------------------------------------------------
    def submit(
        self, starts: np.ndarray, sizes: np.ndarray, control: bool, deliver: Deliver
    ) -> None:
        """Packets reach the switch at ``starts`` (ascending); ``deliver`` learns their fate."""
        if len(starts):
            self._pending.append(
                _Submission(starts, np.asarray(sizes, np.float64), control, deliver)
            )
            self._schedule(float(starts[0]))

    @property
    def pending(self) -> bool:
        """Whether submitted packets wait to be carried."""
        return bool(self._pending)

    def pending_until(self) -> float:
        """Latest switch arrival among packets not yet carried (-inf when none)."""
        return max((float(p.starts[-1]) for p in self._pending), default=float("-inf"))

    def _schedule(self, first: float) -> None:
        """Carry at ``first + delay`` (unless an earlier carry is already due)."""
        when = max(first + self.delay_s, self.env.now)
        if self._tick is None or when < self._tick:
            self._tick = when
            self.env.timeout(when - self.env.now).callbacks.append(lambda _e: self._fire(when))

    def _fire(self, when: float) -> None:
        if self._tick != when:
            return  # superseded by an earlier tick
        self._tick = None
        self.flush(self.env.now)
        if self._pending:
            self._schedule(min(float(p.starts[p.done]) for p in self._pending))

    def flush(self, until: float) -> None:
        """Carry every pending packet that reaches the switch by ``until``, in time order."""
        parts = []
        for sub in self._pending:
            stop = sub.done + int(np.searchsorted(sub.starts[sub.done :], until, side="right"))
            if stop > sub.done:
                parts.append((sub, sub.done, stop))
        if not parts:
            return
        starts = np.concatenate([sub.starts[a:b] for sub, a, b in parts])
        sizes = np.concatenate([sub.sizes[a:b] for sub, a, b in parts])
        control = np.concatenate([np.full(b - a, sub.control) for sub, a, b in parts])
        order = np.argsort(starts, kind="stable")
        arrive = np.empty(len(starts))
        arrive[order] = self.carry(starts[order], sizes[order], control[order])
        at = 0
        for sub, a, b in parts:
            sub.done = b
            sub.deliver(a, b, arrive[at : at + b - a])
            at += b - a
        self._pending = [p for p in self._pending if p.done < len(p.starts)]

    # --- the queue and the wire ---------------------------------------------------------
    def carry(self, starts: np.ndarray, sizes: np.ndarray, control: np.ndarray) -> np.ndarray:
        """Carry packets that reach the switch at ``starts`` (seconds, ascending).

        ``control`` flags control messages (their own loss model). Returns each packet's
        arrival time at the far end, NaN where it was dropped (queue overflow or loss).
        """
        n = len(starts)
        if n == 0:
            return np.empty(0)
        ser = sizes * (8.0 / self.rate_bps)
        cum = np.cumsum(ser)
        # FIFO: finish_i = max(last, max_j<=i (start_j - cum_{j-1})) + cum_i
        base = np.maximum.accumulate(np.maximum(starts - (cum - ser), self.last_finish))
        finish = base + cum
        before = np.concatenate(([self.last_finish], finish[:-1]))
        backlog = np.maximum(before - starts, 0.0) * (self.rate_bps / 8.0)
        if (backlog + sizes > self.buffer_bytes).any():
            finish, backlog = self._carry_overflowing(starts, sizes, ser)
        else:
            self.last_finish = float(finish[-1])
        queued = ~np.isnan(finish)
        st = self.stats
        st.max_backlog_bytes = max(st.max_backlog_bytes, float(backlog.max()))
        st.queue_drops += int(n - queued.sum())
        lost = np.zeros(n, dtype=bool)
        data = ~control
        lost[data] = self._losses(sizes[data], self.impairments.loss)
        lost[control] = self._losses(sizes[control], self.impairments.control_loss)
        lost &= queued
        st.control_packets += int(control.sum())
        st.control_lost += int((lost & control).sum())
        st.packets += int(data.sum())
        st.bytes += int(sizes[data].sum())
        st.lost += int((lost & data).sum())
        arrive = finish + self.delay_s
        imp = self.impairments
        if imp.reorder > 0:
            held = (self.rng.random(n) < imp.reorder) & queued & ~lost
            if held.any():
                st.reordered += int(held.sum())
                arrive[held] += self.rng.random(int(held.sum())) * imp.reorder_delay_s
        arrive[lost] = np.nan
        return arrive

    def _carry_overflowing(
        self, starts: np.ndarray, sizes: np.ndarray, ser: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Packet by packet: drop-tail when the backlog plus the packet exceeds the buffer."""
        finish = np.full(len(starts), np.nan)
        backlog = np.zeros(len(starts))
        last, cap, bytes_per_s = self.last_finish, self.buffer_bytes, self.rate_bps / 8.0
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

    def _losses(self, sizes: np.ndarray, model: LossModel | None) -> np.ndarray:
        n = len(sizes)
        if model is None or n == 0:
            return np.zeros(n, dtype=bool)
        if isinstance(model, Bernoulli):
            return self.rng.random(n) < model.p
        rng = self.rng
        return np.fromiter((model.drop(rng, int(s)) for s in sizes.tolist()), bool, count=n)
