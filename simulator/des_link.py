"""The link of the discrete-event simulation: NICs, a drop-tail switch queue, the long haul.

One :class:`LinkDirection` carries packets from one site to the other: every host NIC at
that site feeds one bottleneck switch queue (drop-tail, ``buffer_bytes``) that serializes
at the link rate; a packet then crosses the link in ``one_way_delay_s``, may be lost (a
loss model from :mod:`simulator.loss`, drawn once per packet; data and control packets
have separate models, so the ACK path can be lossy on its own) and may be held back by up
to ``reorder_delay_s`` (reordering).

The queue is computed, not stepped: a FIFO single server finishes packet ``i`` at
``max(arrival_i, finish_{i-1}) + size_i / rate``, so a batch of packets is carried with a
few NumPy operations (a per-packet loop only when the queue overflows) and the caller
learns every packet's arrival time at once. Batches are carried in the order the NICs
post them; each NIC accepts at most ``horizon`` seconds of packets ahead of its wire
(see :class:`Nic`), which bounds how far two senders' packets can be out of time order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sdr.errors import ConfigError
from simulator.link import Link
from simulator.loss import Bernoulli, LossModel

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


class LinkDirection:
    """One direction of the long-haul link: switch queue, serialization, delay, loss."""

    def __init__(
        self,
        link: Link,
        impairments: PathImpairments,
        rng: np.random.Generator,
        *,
        buffer_bytes: float | None = None,
    ) -> None:
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

    def carry(self, starts: np.ndarray, sizes: np.ndarray, control: bool = False) -> np.ndarray:
        """Carry packets that reach the switch at ``starts`` (seconds, in order).

        Returns each packet's arrival time at the far end, NaN where it was dropped (queue
        overflow or loss).
        """
        n = len(starts)
        if n == 0:
            return np.empty(0)
        sizes = np.asarray(sizes, dtype=np.float64)
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
        lost = self._losses(sizes, control) & queued
        if control:
            st.control_packets += n
            st.control_lost += int(lost.sum())
        else:
            st.packets += n
            st.bytes += int(sizes.sum())
            st.lost += int(lost.sum())
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

    def _losses(self, sizes: np.ndarray, control: bool) -> np.ndarray:
        model = self.impairments.control_loss if control else self.impairments.loss
        n = len(sizes)
        if model is None:
            return np.zeros(n, dtype=bool)
        if isinstance(model, Bernoulli):
            return self.rng.random(n) < model.p
        rng = self.rng
        return np.fromiter((model.drop(rng, int(s)) for s in sizes.tolist()), bool, count=n)
