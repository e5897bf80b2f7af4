"""The link of the discrete-event simulation: host NICs, and the one link on simpy time.

What a direction does to packets (drop-tail switch queue, serialization, propagation, loss,
reordering, blackouts) is :class:`sdr.simulator.link_model.LinkDirection`, the same state
machine the WAN emulator applies to real packets. This module only *schedules* it: a
:class:`DirectionScheduler` collects the packets every host NIC at a site posts and offers
them to the direction in time order, at the moment their fate can no longer change, then
tells each sender when its packets land (or that they were lost); the receiving host is
woken for the arrivals it needs. :class:`Nic` is a host's transmitter.

Several senders' packets are merged in time order before they enter the queue (see
:class:`DirectionScheduler`), so a shared link is exact, not an approximation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import simpy

from sdr.errors import ConfigError
from sdr.simulator import link_model
from sdr.simulator.link_model import LinkSpec, LinkStats

__all__ = ["PathBlackouts", "Nic", "DirectionScheduler", "check_path_blackouts", "dark"]

PathBlackouts = tuple[tuple[tuple[float, float], ...], ...]
"""Per path (a QP channel: ``path_blackouts[p]`` for channel ``p``), the ``(start, end)``
intervals of simulated time, in seconds, during which the path is a black hole: a data
packet of that channel that reaches the switch in one is dropped before the switch queue
(it takes no room there); a path past the tuple's end never goes dark. Control messages
travel on path 0. (A :class:`LinkSpec`'s own ``blackouts`` darken the whole direction,
relative to its first packet: a one-path link cannot say more.)"""


def check_path_blackouts(value: Iterable[Iterable[tuple[float, float]]]) -> PathBlackouts:
    """``value`` as per-path tuples of (start, end) seconds, else a one-line ConfigError."""
    example = "e.g. ((), ((0.5, 0.8),)) for path 1 dark from 0.5 s to 0.8 s"
    try:
        spans = tuple(tuple((float(lo), float(hi)) for lo, hi in path) for path in value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"path blackouts must be, per path, (start, end) pairs in seconds; got {value!r}; "
            + example
        ) from None
    for path in spans:
        for lo, hi in path:
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
                raise ConfigError(
                    f"a blackout must be (start, end) with 0 <= start <= end, finite; got "
                    f"{(lo, hi)!r}; {example}"
                )
    return spans


def dark(path_blackouts: PathBlackouts, starts: np.ndarray, paths: np.ndarray) -> np.ndarray:
    """Which packets, reaching the switch at ``starts`` on ``paths``, a blackout drops."""
    out = np.zeros(len(starts), bool)
    for path, spans in enumerate(path_blackouts):
        on_path = paths == path
        for lo, hi in spans:
            out |= on_path & (lo <= starts) & (starts < hi)
    return out


class Nic:
    """A host's transmitter: serializes at ``rate`` (bits/s) and accepts ``horizon_s`` ahead.

    ``budget`` says how many packets fit before the transmitter is ``horizon_s`` ahead of
    ``now``; a sender that filled it is woken again when the transmitter drains
    (``free_at``). A packet's departure (as the sender's reliability layer sees it) is its
    post time, as with a real NIC's send queue.
    """

    def __init__(self, rate: float, horizon_s: float) -> None:
        if not rate > 0:
            raise ConfigError(f"NIC rate must be > 0 bit/s, got {rate!r}")
        self.rate = float(rate)
        self.horizon_s = float(horizon_s)
        self.free_at = 0.0

    def budget(self, now: float, packet_bytes: int) -> int:
        """Packets of ``packet_bytes`` that may be posted at ``now``."""
        room = now + self.horizon_s - max(self.free_at, now)
        per_packet = packet_bytes * 8.0 / self.rate
        return max(0, int(room / per_packet + 1e-9)) if per_packet > 0 else 1 << 16

    def reserve(self, now: float, sizes: np.ndarray) -> np.ndarray:
        """Queue packets of ``sizes`` bytes; returns when each starts on the wire."""
        ser = sizes * (8.0 / self.rate)
        t0 = max(now, self.free_at)
        ends = t0 + np.cumsum(ser)
        self.free_at = float(ends[-1]) if len(ends) else self.free_at
        return ends - ser


Deliver = Callable[[int, int, np.ndarray], None]
"""Called with (first, stop, arrival times) for packets [first, stop) of a submission."""


class _Submission:
    __slots__ = ("starts", "sizes", "control", "deliver", "paths", "done")

    def __init__(
        self,
        starts: np.ndarray,
        sizes: np.ndarray,
        control: bool,
        deliver: Deliver,
        paths: np.ndarray,
    ):
        self.starts, self.sizes, self.control, self.deliver = starts, sizes, control, deliver
        self.paths = paths
        self.done = 0


class DirectionScheduler:
    """Schedules one :class:`~sdr.simulator.link_model.LinkDirection` on simpy time.

    Packets are *submitted* when a NIC posts them, with the time each reaches the switch,
    and *offered* to the direction later, all NICs' packets merged in time order: at
    ``s + one_way_delay`` for the earliest pending start ``s`` every packet that starts by
    then is known (a NIC cannot post into the past), and none of them can land before that
    moment. So the FIFO is exact for any number of senders, and one pass carries a whole
    propagation delay's worth of packets.

    ``rng`` (optional) spawns the direction's random streams instead of ``spec.seed``.
    ``path_blackouts`` (optional) black-holes packets per path (:data:`PathBlackouts`).
    The simulator does not model duplication or corruption (a spec with them is refused).
    """

    def __init__(
        self,
        env: simpy.Environment,
        spec: LinkSpec,
        rng: np.random.Generator | None = None,
        path_blackouts: Iterable[Iterable[tuple[float, float]]] = (),
    ) -> None:
        if spec.duplicate or spec.corrupt:
            raise ConfigError(
                "the discrete-event simulation does not model duplication or corruption; "
                f"got duplicate={spec.duplicate!r}, corrupt={spec.corrupt!r}"
            )
        self.env = env
        self.spec = spec
        self.path_blackouts = check_path_blackouts(path_blackouts)
        self.direction = link_model.LinkDirection(spec, rng)
        self.one_way_delay = self.direction.one_way_delay
        self._pending: list[_Submission] = []
        self._tick: float | None = None

    @property
    def stats(self) -> LinkStats:
        """The direction's counters."""
        return self.direction.stats

    @property
    def last_finish(self) -> float:
        """When the switch's wire is free."""
        return self.direction.last_finish

    # --- submission and merged processing ------------------------------------------------
    def submit(
        self,
        starts: np.ndarray,
        sizes: np.ndarray,
        control: bool,
        deliver: Deliver,
        paths: np.ndarray | None = None,
    ) -> None:
        """Packets reach the switch at ``starts`` (ascending) on ``paths`` (the QP channel
        of each; default path 0); ``deliver`` learns their fate."""
        if len(starts):
            on = np.zeros(len(starts), np.int64) if paths is None else np.asarray(paths)
            self._pending.append(
                _Submission(starts, np.asarray(sizes, np.float64), control, deliver, on)
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
        when = max(first + self.one_way_delay, self.env.now)
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
        arrive = np.full(len(starts), np.nan)
        if not self.path_blackouts:
            arrive[order] = self.carry(starts[order], sizes[order], control[order])
        else:  # a dark path's packets never reach the queue
            paths = np.concatenate([sub.paths[a:b] for sub, a, b in parts])
            lit = order[~dark(self.path_blackouts, starts[order], paths[order])]
            self.stats.blackout_drops += len(order) - len(lit)
            if len(lit):
                arrive[lit] = self.carry(starts[lit], sizes[lit], control[lit])
        at = 0
        for sub, a, b in parts:
            sub.done = b
            sub.deliver(a, b, arrive[at : at + b - a])
            at += b - a
        self._pending = [p for p in self._pending if p.done < len(p.starts)]

    def carry(self, starts: np.ndarray, sizes: np.ndarray, control: np.ndarray) -> np.ndarray:
        """Offer packets to the direction now; their arrival times, NaN where dropped."""
        return self.direction.offer(starts, sizes, control).arrive
