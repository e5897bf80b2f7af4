"""Drives the real SDR stack on simulated time: one simpy process per host.

The real-time driver (:func:`sdr.runtime.drive`) spins ``progress()`` and sleeps
until the next timer. Here each host is a simpy process that sleeps on an event and is
woken when something it must react to happens: a packet or control message lands (the
simulated transport knows the arrival times when the packets are sent), a timer of one of
its reliable QPs expires (``ReliableQP.next_timer()``), its NIC drains while a sender has
more to post, or the scenario posted work. On each wake it calls ``progress()`` on every
reliable QP until there is no work left, then schedules its next timer wake. Nothing of
the core or the schemes is replaced: they read time through the transport's ``now()``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

import sdr
from sdr.errors import SDRError
from sdr.runtime import ReliableQP
from sdr.simulator.des_transport import DesFabric, DesTransport
from sdr.simulator.link import Link
from sdr.simulator.link_spec import LinkSpec

__all__ = ["CountingEnvironment", "DesHost", "DesSim"]

_MIN_STEP_S = 1e-7
_MAX_ROUNDS = 100_000


class CountingEnvironment(simpy.Environment):
    """A simpy environment that counts the events it processes (for speed reports)."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


class DesHost:
    """One host: an ``sdr.Context`` on a :class:`DesTransport` and its reliable QPs."""

    def __init__(self, sim: DesSim, transport: DesTransport) -> None:
        self.sim = sim
        self.env = sim.env
        self.transport = transport
        self.ctx = sdr.Context(backend=transport)
        self.rqps: list[ReliableQP] = []
        self.steps = 0
        self._signal = self.env.event()
        self._pending: set[float] = set()
        transport.on_wake = self.wake_many
        self.env.process(self._run())

    # --- wake-ups -----------------------------------------------------------------------
    def kick(self) -> None:
        """Progress this host now (e.g. after the scenario posted a write)."""
        if not self._signal.triggered:
            self._signal.succeed()

    def wake_at(self, when: float) -> None:
        """Progress this host at simulated time ``when`` (once per distinct time)."""
        now = self.env.now
        if when <= now:
            self.kick()
        elif when not in self._pending:
            self._pending.add(when)
            self.env.timeout(when - now).callbacks.append(lambda _e: self._fire(when))

    def wake_many(self, times: list[float]) -> None:
        for when in times:
            self.wake_at(when)

    def _fire(self, when: float) -> None:
        self._pending.discard(when)
        self.kick()

    # --- the process --------------------------------------------------------------------
    def _run(self) -> Generator[simpy.Event, Any, None]:
        while True:
            yield self._signal
            self._signal = self.env.event()
            self.step()

    def step(self) -> None:
        """Progress every reliable QP until idle, then arm the next timer wake."""
        self.steps += 1
        rqps = self.rqps
        for _ in range(_MAX_ROUNDS):
            work = sum(r.progress() for r in rqps) if rqps else self.ctx.progress()
            if not work:
                break
        else:
            raise SDRError(f"host made progress {_MAX_ROUNDS} times without going idle")
        now = self.env.now
        timers = [t for t in (r.next_timer() for r in rqps) if t is not None]
        blocked = self.transport.blocked_until()
        if blocked is not None:
            timers.append(blocked)
        if timers:
            self.wake_at(max(min(timers), now + _MIN_STEP_S))
        self.sim.after_step()


class DesSim:
    """A simulation: a simpy environment, one link (:class:`DesFabric`) and its hosts.

    Keyword arguments go to :class:`DesFabric` (the two directions' :class:`LinkSpec`,
    path blackouts, seed, headers ...).
    """

    def __init__(
        self,
        link: Link,
        *,
        forward: LinkSpec | None = None,
        reverse: LinkSpec | None = None,
        **fabric_options: Any,
    ) -> None:
        self.env = CountingEnvironment()
        self.link = link
        self.fabric = DesFabric(self.env, link, forward=forward, reverse=reverse, **fabric_options)
        self.hosts: list[DesHost] = []
        self._waiters: list[tuple[Callable[[], bool], simpy.Event]] = []
        self._watched: dict[int, Any] = {}
        self.finished_at: dict[int, float] = {}
        """Simulated time at which each watched handle finished, by ``id(handle)``."""

    def host(self, site: str, nic_rate: float | None = None) -> DesHost:
        """Add a host at ``site`` ("a" or "b") with a NIC of ``nic_rate`` (the link rate)."""
        host = DesHost(self, self.fabric.host(site, nic_rate))
        self.hosts.append(host)
        return host

    def reliable_pair(
        self,
        sender: DesHost,
        receiver: DesHost,
        attr: sdr.QPAttr,
        config: Any,
    ) -> tuple[ReliableQP, ReliableQP]:
        """Connect a QP on each host and put a :class:`ReliableQP` on both ends."""
        qa, qb = sender.ctx.create_qp(attr), receiver.ctx.create_qp(attr)
        qa.connect(qb.info())
        qb.connect(qa.info())
        ra, rb = ReliableQP(qa, config), ReliableQP(qb, config)
        sender.rqps.append(ra)
        receiver.rqps.append(rb)
        return ra, rb

    # --- scenario helpers ---------------------------------------------------------------
    def watch(self, handle: Any) -> None:
        """Record the simulated time at which ``handle`` finishes (see ``finished_at``)."""
        self._watched[id(handle)] = handle

    def until(self, condition: Callable[[], bool]) -> simpy.Event:
        """An event that fires after the first host step at which ``condition()`` holds."""
        event = self.env.event()
        if condition():
            event.succeed()
        else:
            self._waiters.append((condition, event))
        return event

    def after_step(self) -> None:
        """Called by hosts after each step: record finishes, release waiters."""
        now = self.env.now
        if self._watched:
            done = [key for key, h in self._watched.items() if h.finished]
            for key in done:
                self.finished_at[key] = now
                del self._watched[key]
        if self._waiters:
            keep = []
            for condition, event in self._waiters:
                if condition():
                    event.succeed()
                else:
                    keep.append((condition, event))
            self._waiters = keep

    def quiet(self) -> Generator[simpy.Event, Any, None]:
        """Wait (in a scenario process) until no packet is queued or in flight anywhere."""
        while not self.fabric.idle:
            for host in self.hosts:
                host.kick()
            yield self.env.timeout(max(self.fabric.busy_until() - self.env.now, _MIN_STEP_S))

    @property
    def events(self) -> int:
        """simpy events processed so far."""
        return self.env.events_processed
