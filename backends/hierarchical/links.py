"""SDR links between datacenters: one UDP context per rank, one reliable QP per peer.

A rank talks to its peers in the other datacenters (the ranks with the same local index)
through one :class:`sdr.Context` on the UDP backend (software RoCEv2) bound to the
address of its datacenter, one SDR QP per peer, and one :class:`ReliableQP` per QP with
the configured reliability scheme. QP information is exchanged out of band through the
job's bootstrap (``all_gather`` of small objects), as perftest does over TCP.

Progress: SDR is progressed by whoever waits. While this rank runs a WAN collective, its
waits progress the QPs; at every other time (intra-datacenter phases, the application's
own compute) a background thread does, so acknowledgements, retransmissions and paced
sends never stall a peer that still waits for them (a lost ACK would otherwise wait for
this rank's next collective, and a rank blocked inside its datacenter could deadlock the
ring). :meth:`SdrLinks.exclusive` hands progress to the caller for the WAN phase.

``scheme = "auto"`` is resolved once, at set-up, through the simulator's selector
(:func:`sdr.simulator.auto.resolve_auto`) for the link described by the options and the
expected size of one WAN write (``size_hint``); every rank resolves the same inputs, so
both ends of every link agree.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sdr
from sdr.backends.collectives.interfaces import Bootstrap
from sdr.backends.hierarchical.port_channel import SdrPortChannel
from sdr.backends.udp import UdpTransport
from sdr.errors import ConfigError
from sdr.reliability import ReliabilityConfig
from sdr.reliability.config import SACKS_PER_RTT
from sdr.runtime import ReliableQP, drive
from sdr.units import parse_rate, parse_size, parse_time

__all__ = ["SdrLinkOptions", "SdrLinks"]

log = logging.getLogger(__name__)

_IDLE_S = 0.002
"""Longest sleep of the background progress thread with nothing to do, on a transport
that cannot interrupt a wait: it must notice work the caller left it on its own."""
_IDLE_INTERRUPTIBLE_S = 0.1
"""... and where the caller interrupts the wait when it hands the QPs back (UDP): arrivals
and the caller wake the thread, so the bound is only a safety net. At 2 ms an idle
communicator cost each rank 4-5% of a core in wake-ups (500 a second) while its
training thread computed."""
SMALL_COPIES_FROM = 1e-3
"""Expected loss from which one-chunk messages go out twice: a collective waits on a
few of them per call, and at 1e-2 one is lost in every few calls (an RTO, 3 RTTs)."""


@dataclass(frozen=True)
class SdrLinkOptions:
    """How ranks talk across datacenters. Sizes, rates and times accept units.

    scheme: ``sr-rto``, ``sr-nack``, ``ec-mds``, ``ec-xor`` or ``auto``.
    rate: provisioned rate of the inter-datacenter link (pacing and T_INJ), bits/s.
    sharers: this datacenter's ranks that cross the link at once (its local size): each
        paces at ``rate / sharers``, so together they fill the link and do not overrun it.
    rtt: round-trip time of the link (RTO, FTO).
    loss: expected packet drop rate: ``auto`` picks the scheme from it, and from 1e-3 on
        every message of one chunk (a deadline call's note, a barrier) goes out twice
        (``ReliabilityConfig.small_copies``), so that one lost packet does not cost it an
        RTO.
    mtu, chunk_size: SDR packet payload and bitmap chunk (chunk a multiple of the MTU).
    max_message_size: largest WAN write (one port put); bigger puts raise ConfigError.
    size_hint: bytes of a typical WAN write, for ``auto``.
    k, m: erasure-coding data and parity chunks (None: the scheme's default).
    channels: transport QPs per generation.
    timeout: seconds any single wait may take before sdr.TimeoutError; also the
        reliability layer's global timeout of one write.
    """

    scheme: str = "auto"
    rate: str | float = "1Gbit/s"
    sharers: int = 1
    rtt: str | float = "25ms"
    loss: float = 1e-3
    alpha: float = 2.0
    mtu: str | int = 8192
    chunk_size: str | int = 8192
    max_message_size: str | int = "16MiB"
    size_hint: str | int = "1MiB"
    k: int | None = None
    m: int | None = None
    channels: int = 1
    timeout: float = 120.0

    def __post_init__(self) -> None:
        if isinstance(self.sharers, bool) or not isinstance(self.sharers, int) or self.sharers < 1:
            raise ConfigError(f"sharers must be a positive integer, got {self.sharers!r}")

    def replace(self, **changes: Any) -> SdrLinkOptions:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @property
    def pace(self) -> float:
        """Bits/s one rank sends at: its share of the link's rate."""
        return parse_rate(self.rate) / self.sharers

    def attr(self) -> sdr.QPAttr:
        """The SDR QP attributes of every link."""
        return sdr.QPAttr(
            mtu=self.mtu,
            chunk_size=self.chunk_size,
            max_message_size=self.max_message_size,
            max_messages=127,  # odd: ids repeat only every 127 x 1024 messages
            channels=self.channels,
            rate_limit=self.pace,
        )

    def reliability(self) -> tuple[ReliabilityConfig, Any]:
        """The concrete reliability config (``auto`` resolved) and the selection or None."""
        changes: dict[str, Any] = {
            "scheme": self.scheme,
            "rtt": parse_time(self.rtt),
            "alpha": self.alpha,
            "link_rate": self.pace,
            "chunk_size": parse_size(self.chunk_size),
            # a peer posts its receives when the application reaches its next collective,
            # which may be long after our write starts: wait as long as any collective wait
            "global_timeout": self.timeout,
            "small_copies": 2 if self.loss >= SMALL_COPIES_FROM else 1,
            # a collective waits on acknowledgements and clear-to-sends (a deadline's cut
            # is dated by one), and a receiver sees them only once its hold ends: keep the
            # finer SACK interval, not the file transfer's (which trades it for CPU)
            "ack_interval": parse_time(self.rtt) / SACKS_PER_RTT,
        }
        if self.k is not None and self.m is not None:
            changes.update(k=self.k, m=self.m)
        config = ReliabilityConfig().replace(**changes)
        if config.scheme != "auto":
            return config, None
        from sdr.simulator.auto import resolve_auto  # loads SciPy: only for "auto"

        return resolve_auto(
            config,
            size_bytes=parse_size(self.size_hint),
            drop=self.loss,
            mtu=parse_size(self.mtu),
            chunk_sizes=(parse_size(self.chunk_size),),
        )


Address = tuple[str, int]


def _through(info: bytes, data: Address, control: Address) -> bytes:
    """Peer info rewritten to reach the peer through a middlebox's stand-in ports."""
    body = json.loads(info)
    body["transport"].update(host=data[0], port=data[1], control_port=control[1])
    return json.dumps(body).encode()


class SdrLinks:
    """This rank's SDR connections to ``peers`` (ranks of the bootstrap), set up collectively.

    Every rank of ``bootstrap`` must construct its SdrLinks at the same time (the QP
    exchange is one ``all_gather``). ``host`` is the local address other datacenters reach
    this rank at. ``port_ranks`` maps a bootstrap rank to its rank in the port plans
    (its datacenter index).

    ``port`` / ``control_port``: this rank's UDP ports (0: any free one). ``routes`` maps a
    peer's bootstrap rank to the (data, control) addresses to send to instead of the
    peer's own (a middlebox in between, e.g. the WAN emulator's relay on loopback).
    """

    def __init__(
        self,
        bootstrap: Bootstrap,
        port_ranks: dict[int, int],
        host: str,
        options: SdrLinkOptions | None = None,
        *,
        port: int = 0,
        control_port: int = 0,
        routes: dict[int, tuple[Address, Address]] | None = None,
    ) -> None:
        self.options = options or SdrLinkOptions()
        self.config, self.selection = self.options.reliability()
        me = bootstrap.rank
        if me not in port_ranks:
            raise ConfigError(f"rank {me} is not among the linked ranks {sorted(port_ranks)}")
        self.port_rank = port_ranks[me]
        self.bootstrap = bootstrap
        attr = self.options.attr()
        self.ctx = sdr.Context(UdpTransport(host=host, port=port, control_port=control_port))
        peers = [r for r in port_ranks if r != me]
        qps = {r: self.ctx.create_qp(attr) for r in peers}
        infos = bootstrap.all_gather({r: qp.info() for r, qp in qps.items()})
        routes = routes or {}
        for r, qp in qps.items():
            info = infos[r][me]
            if r in routes:
                info = _through(info, *routes[r])
            qp.connect(info)
        self.rqps = {port_ranks[r]: ReliableQP(qp, self.config) for r, qp in qps.items()}
        self.channels = {
            p: SdrPortChannel(p, rqp, self.drive, self.options.timeout)
            for p, rqp in self.rqps.items()
        }
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._background, daemon=True, name="sdr-progress")
        bootstrap.barrier()  # every QP connected before anyone writes
        if self.rqps:
            self._thread.start()
        log.info(
            "rank %d: SDR links to %d datacenter peers, scheme %s",
            me,
            len(self.rqps),
            self.config.scheme,
        )

    @property
    def scheme(self) -> str:
        """The concrete reliability scheme in use (``auto`` already resolved)."""
        return self.config.scheme

    def _background(self) -> None:
        rqps = list(self.rqps.values())
        transport = self.ctx.transport
        idle = _IDLE_INTERRUPTIBLE_S if transport.can_interrupt else _IDLE_S
        while not self._stop.is_set():
            with self._lock:
                if self._stop.is_set():
                    break
                work = sum(r.progress() for r in rqps)
                now = self.ctx.now()
                timers = [t for t in (r.next_timer() for r in rqps) if t is not None]
                step = min([idle] + [max(t - now, 0.0) for t in timers])
                step = min([step] + [r.idle_step() for r in rqps])
            if not work:
                transport.wait(step)  # outside the lock: the caller may take over at once

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """The caller progresses the QPs (by waiting on channels); the thread stands by,
        and on the way out is woken to take over what the caller left (timers it set,
        writes still in flight) from where it is now."""
        try:
            with self._lock:
                yield
        finally:
            self.ctx.transport.interrupt()

    def drive(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Progress every reliable QP of this rank until ``condition()`` holds."""
        if not self.rqps:
            return
        drive(list(self.rqps.values()), condition, timeout, what)

    def counters(self) -> dict[str, int]:
        """Reliability counters summed over peers (retransmissions, NACKs, decodes ...)."""
        total: dict[str, int] = {}
        for rqp in self.rqps.values():
            for key, value in rqp.counters.items():
                total[key] = total.get(key, 0) + value
        return total

    def close(self, drain: bool = True) -> None:
        """Close collectively: wait for this rank's writes to be acknowledged, then meet
        every rank in a barrier while still answering peers (a lost ACK is re-requested
        by its sender), so no rank closes while a peer still needs it. ``drain=False``
        closes at once (after an error)."""
        self._stop.set()
        if self._thread.is_alive():
            self.ctx.transport.interrupt()
            self._thread.join()
        try:
            if drain and self.rqps:
                for ch in self.channels.values():
                    ch.flush()
                done = threading.Event()
                failed: list[BaseException] = []

                def meet() -> None:
                    try:
                        self.bootstrap.barrier()
                    except BaseException as exc:  # noqa: BLE001 - re-raised below
                        failed.append(exc)
                    done.set()

                threading.Thread(target=meet, daemon=True).start()
                self.drive(done.is_set, self.options.timeout, "closing barrier")
                if failed:
                    raise failed[0]
        finally:
            self.ctx.close()
