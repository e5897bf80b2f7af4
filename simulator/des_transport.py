"""The simulated transport: the core's Transport interface on simulated time and links.

:class:`DesTransport` is a backend in all but registration: ``sdr.Context(backend=t)``
runs the real SDR core (and :class:`sdr.ReliableQP` on top) over it. Its clock is simpy's
``env.now``; posted packets go through the host :class:`Nic` and a
:class:`~sdr.simulator.des_link.DirectionScheduler` (the one link, scheduled), which
tell at once when each packet lands (or that it is lost); packets wait in the receiving
QP's inbox until the simulated time passes their arrival.
Placement is the core's software-NIC step (:mod:`sdr.placement`) over the QP's
:class:`KeyTable`, exactly as in the other software drivers (late, stale and
out-of-range packets are discarded and counted). Payload bytes are copied
at placement when ``copy_payload`` is set (the whole stack, checksums included, then
runs on real data); otherwise only the bitmaps move, which is enough for timing when the
buffers hold identical bytes (e.g. zeros).

The owner of the transport (a :class:`sdr.simulator.des_driver.DesHost`) is told, through
``on_wake``, when something it must react to lands: every control message, the packet
that ends a chunk (or a posted batch, or that was reordered). Packets in between are
picked up with it, so a receiver sees a chunk's bit when its last packet arrives.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np
import simpy

from sdr.config import QPAttr
from sdr.errors import ConfigError, LocalProtocolError, TransportError
from sdr.key_table import KeyTable, KeyTableBindings
from sdr.pacing import TokenBucket
from sdr.simulator.des_link import DirectionScheduler, Nic
from sdr.simulator.link import Link
from sdr.simulator.link_spec import LinkSpec
from sdr.transport import (
    MAX_CONTROL_SIZE,
    CompletionBatch,
    MemoryRegion,
    Transport,
    TransportQP,
    WriteBatch,
    as_byte_view,
    concat_completions,
)

__all__ = ["DesFabric", "DesTransport", "DesQP"]

_EMPTY = CompletionBatch.empty()
_endpoint_ids = itertools.count(1)
_region_keys = itertools.count(1)


class DesQP(KeyTableBindings, TransportQP):
    """Transport side of one SDR QP inside the simulation."""

    def __init__(self, transport: DesTransport, attr: QPAttr) -> None:
        self.transport = transport
        self.attr = attr
        self.keys = KeyTable(attr)
        self.eid = next(_endpoint_ids)
        self.peer: DesQP | None = None
        self._data: list[tuple[float, int, tuple[Any, ...]]] = []
        self._control: list[tuple[float, int, bytes]] = []
        self._order = itertools.count()
        self._granted = 1
        self._wire_mtu = attr.mtu + transport.header_bytes
        self.pacer = TokenBucket(None, max(attr.chunk_size, 16 * attr.mtu) * 8)
        """Unpaced (the NIC serializes at the link rate) until a congestion controller
        sets a rate (:meth:`set_pacing_rate`)."""
        transport.endpoints[self.eid] = self
        transport.fabric.endpoints[self.eid] = self

    # --- set-up -------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {"fabric": self.transport.fabric.id, "endpoint": self.eid}

    def connect(self, remote: dict[str, Any]) -> None:
        fabric = self.transport.fabric
        peer = fabric.endpoints.get(int(remote.get("endpoint", -1)))
        if peer is None or remote.get("fabric") != fabric.id:
            raise ConfigError("DES peers must be hosts of the same DesFabric")
        if peer.transport.site == self.transport.site:
            raise ConfigError("DES peers must sit at opposite ends of the link (sites a and b)")
        self.peer = peer

    # --- sending ------------------------------------------------------------------------
    def send_budget(self, now: float) -> int:
        nic = self.transport.nic.budget(now, self._wire_mtu)
        self._granted = min(nic, self.pacer.budget(now, self._wire_mtu * 8))
        return self._granted

    def set_pacing_rate(self, now: float, bits_per_s: float) -> None:
        self.pacer.set_rate(now, bits_per_s)

    def next_send_time(self, now: float) -> float:
        """When this QP may post again: the NIC drained and the pacer allows a packet."""
        return max(self.transport.nic.free_at, self.pacer.next_send_time(now, self._wire_mtu * 8))

    @property
    def blocked(self) -> bool:
        """Whether the last budget was used up (the sender may have more to post)."""
        return self._granted <= 0

    def post_writes(self, batch: WriteBatch) -> None:
        peer = self.peer
        if peer is None:
            raise TransportError("QP is not connected")
        n = len(batch)
        if n == 0:
            return
        self._granted -= n
        t = self.transport
        sizes = batch.lengths + t.header_bytes
        self.pacer.consume(t.now(), float(sizes.sum()) * 8)
        starts = t.nic.reserve(t.now(), sizes)
        t.direction.submit(
            starts,
            sizes,
            False,
            lambda a, b, arrive: self._land(batch, a, b, arrive),
            batch.channels,
        )

    def _land(self, batch: WriteBatch, first: int, stop: int, arrive: np.ndarray) -> None:
        """Packets [first, stop) of ``batch`` were carried: queue them at the peer."""
        t, peer, attr = self.transport, self.peer, self.attr
        assert peer is not None
        for tap in t.fabric.taps:
            tap(self, batch, first, stop, arrive)
        lengths = batch.lengths[first:stop]
        roffs = batch.remote_offsets[first:stop]
        # wake the receiver when a chunk (or a short packet, or this part) is complete
        ends = ((roffs % attr.max_message_size) + lengths) % attr.chunk_size == 0
        ends |= lengths < attr.mtu
        ends[-1] = True
        if t.direction.spec.reorder > 0:
            ends[:] = True
        region, gen = batch.region, batch.generation
        push, order, heap = heapq.heappush, peer._order, peer._data
        wakes = []
        delivered = None  # the arrival of the last packet of this part that was not lost
        for when, ch, roff, imm, src, length, wake in zip(
            arrive.tolist(),
            batch.channels[first:stop].tolist(),
            roffs.tolist(),
            batch.imms[first:stop].tolist(),
            batch.src_offsets[first:stop].tolist(),
            lengths.tolist(),
            ends.tolist(),
            strict=True,
        ):
            if when != when:  # NaN: dropped on the way
                if wake and delivered is not None:
                    # the packet that would have woken the receiver is lost, but those
                    # before it may complete the chunk (a repair fills the packets an
                    # earlier copy lost): wake it when the last of them is there
                    wakes.append(delivered)
                continue
            push(heap, (when, next(order), (gen, ch, roff, imm, region, src, length)))
            delivered = when
            if wake:
                wakes.append(when)
        peer.transport.wake_many(wakes)

    def send_control(self, data: bytes) -> None:
        if len(data) > MAX_CONTROL_SIZE:
            raise LocalProtocolError(f"control message of {len(data)} bytes > {MAX_CONTROL_SIZE}")
        peer = self.peer
        if peer is None:
            raise TransportError("QP is not connected")
        t = self.transport
        size = np.array([len(data) + t.header_bytes], dtype=np.float64)
        message = bytes(data)

        def land(_first: int, _stop: int, arrive: np.ndarray) -> None:
            when = float(arrive[0])
            if when == when:
                heapq.heappush(peer._control, (when, next(peer._order), message))
                peer.transport.wake_many([when])

        t.direction.submit(t.nic.reserve(t.now(), size), size, True, land)

    # --- receiving ----------------------------------------------------------------------
    def poll_completions(self, max_packets: int) -> CompletionBatch:
        now = self.transport.now()
        heap = self._data
        if not heap or heap[0][0] > now:
            return _EMPTY
        parts: list[CompletionBatch] = []
        placed, pop = 0, heapq.heappop
        while heap and heap[0][0] <= now and placed < max_packets:
            items: list[tuple[Any, ...]] = []  # what has landed, as many as may still complete
            while heap and heap[0][0] <= now and len(items) < max_packets - placed:
                items.append(pop(heap)[2])
            batch = self._place(items)
            placed += len(batch)
            parts.append(batch)
        return parts[0] if len(parts) == 1 else concat_completions(parts)

    def _place(self, items: list[tuple[Any, ...]]) -> CompletionBatch:
        """The software-NIC step over landed packets, in arrival order: payload is read
        from the sender's region (or not at all without ``copy_payload``)."""
        gens, chans, roffs, imms, regions, srcs, lengths = zip(*items, strict=True)
        chan = np.array(chans, dtype=np.uint16)
        gen = np.array(gens, dtype=np.int64)
        roff = np.array(roffs, dtype=np.int64)
        imm = np.array(imms, dtype=np.uint32)
        length = np.array(lengths, dtype=np.int64)
        payloads = None
        if self.transport.copy_payload:
            payloads = [r.view[s : s + n] for r, s, n in zip(regions, srcs, lengths, strict=True)]
        return self.keys.receive(chan, gen, roff, imm, length, payloads)

    def poll_control(self) -> list[bytes]:
        now = self.transport.now()
        heap, out = self._control, []
        while heap and heap[0][0] <= now:
            out.append(heapq.heappop(heap)[2])
        return out

    @property
    def idle(self) -> bool:
        """Nothing addressed to this QP is on its way or waiting to be polled."""
        return not self._data and not self._control

    def last_arrival(self) -> float:
        """When the last packet on its way to this QP lands (-inf when none)."""
        times = [e[0] for e in self._data] + [e[0] for e in self._control]
        return max(times, default=float("-inf"))

    def counters(self) -> dict[str, int]:
        return self.keys.discards()

    def close(self) -> None:
        self.transport.endpoints.pop(self.eid, None)
        self.transport.fabric.endpoints.pop(self.eid, None)


class DesFabric:
    """Both ends of one simulated link: the two directions and every QP endpoint.

    Args:
        env: the simpy environment (its ``now`` is every host's clock).
        link: the hosts' side of the link: MTU, chunk size, and the rate their NICs send at.
        forward, reverse: the a->b and b->a directions (default:
            ``LinkSpec.from_link(link)``: the link's rate and RTT, a queue of its alpha RTTs,
            lossless).
        path_blackouts: per path, when it is dark, in both directions
            (:data:`~sdr.simulator.des_link.PathBlackouts`).
        seed: seeds both directions' loss and reordering draws (independent streams;
            the specs' own ``seed`` is not used).
        header_bytes: bytes added to every packet on the wire (0: payload only, as the
            completion-time model counts).
        copy_payload: place real bytes (True) or move only bitmaps (False).
        nic_queue_packets: MTU packets a NIC accepts ahead of its wire (None: one chunk).
    """

    _ids = itertools.count(1)

    def __init__(
        self,
        env: simpy.Environment,
        link: Link,
        *,
        forward: LinkSpec | None = None,
        reverse: LinkSpec | None = None,
        path_blackouts: Iterable[Iterable[tuple[float, float]]] = (),
        seed: int | None = 0,
        header_bytes: int = 0,
        copy_payload: bool = True,
        nic_queue_packets: int | None = None,
    ) -> None:
        if header_bytes < 0:
            raise ConfigError(f"header_bytes must be >= 0, got {header_bytes!r}")
        queue = link.packets_per_chunk if nic_queue_packets is None else nic_queue_packets
        if queue < 1:
            raise ConfigError(f"nic_queue_packets must be >= 1, got {nic_queue_packets!r}")
        self.id = next(self._ids)
        self.env = env
        self.link = link
        self.header_bytes = int(header_bytes)
        self.copy_payload = copy_payload
        self.nic_queue_packets = int(queue)
        rng_ab, rng_ba = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
        fwd = forward if forward is not None else LinkSpec.from_link(link)
        rev = reverse if reverse is not None else LinkSpec.from_link(link)
        self.directions = {
            "a": DirectionScheduler(env, fwd, rng_ab, path_blackouts),
            "b": DirectionScheduler(env, rev, rng_ba, path_blackouts),
        }
        self.endpoints: dict[int, DesQP] = {}
        self.hosts: list[DesTransport] = []
        self.taps: list[Callable[[DesQP, WriteBatch, int, int, np.ndarray], None]] = []
        """Packet capture: called with (sending QP, batch, first, stop, arrival times of
        packets [first, stop) of the batch, NaN = lost) when the link carried them."""

    def host(self, site: str, nic_rate: float | None = None) -> DesTransport:
        """A new host at ``site`` (``"a"`` or ``"b"``) whose NIC sends at ``nic_rate``.

        The NIC rate defaults to the link rate; a lower one paces the host (several hosts
        at full rate overload the switch queue: SDR has no congestion control).
        """
        if site not in self.directions:
            raise ConfigError(f"site must be 'a' or 'b', got {site!r}")
        rate = self.link.rate if nic_rate is None else nic_rate
        horizon = self.nic_queue_packets * (self.link.mtu + self.header_bytes) * 8.0 / rate
        transport = DesTransport(self, site, Nic(rate, horizon))
        self.hosts.append(transport)
        return transport

    @property
    def idle(self) -> bool:
        """No packet is queued or in flight anywhere."""
        pending = any(d.pending for d in self.directions.values())
        return not pending and all(h.idle for h in self.hosts)

    def busy_until(self) -> float:
        """When the last queued or in-flight packet is through (-inf when idle)."""
        times = [h.nic.free_at for h in self.hosts]
        times += [d.pending_until() + d.one_way_delay for d in self.directions.values()]
        times += [q.last_arrival() for h in self.hosts for q in h.endpoints.values()]
        return max(times, default=float("-inf"))


class DesTransport(Transport):
    """A host at one end of a :class:`DesFabric` (build it with ``fabric.host(site)``)."""

    name: ClassVar[str] = "des"

    def __init__(self, fabric: DesFabric, site: str, nic: Nic) -> None:
        self.fabric = fabric
        self.env = fabric.env
        self.site = site
        self.direction = fabric.directions[site]
        self.nic = nic
        self.header_bytes = fabric.header_bytes
        self.copy_payload = fabric.copy_payload
        self.endpoints: dict[int, DesQP] = {}
        self.on_wake: Callable[[list[float]], None] = lambda times: None
        """Set by the host driver: called with arrival times it must wake up for."""

    def now(self) -> float:
        return self.env.now

    def register(self, buffer: object) -> MemoryRegion:
        return MemoryRegion(key=next(_region_keys), view=as_byte_view(buffer), owner=buffer)

    def create_qp(self, attr: QPAttr) -> DesQP:
        return DesQP(self, attr)

    def wake_many(self, times: list[float]) -> None:
        """Packets for this host land at ``times``: have the host woken then."""
        if times:
            self.on_wake(times)

    def blocked_until(self) -> float | None:
        """When a QP that used up its send budget may post again (else None)."""
        now = self.now()
        times = [qp.next_send_time(now) for qp in self.endpoints.values() if qp.blocked]
        return min(times) if times else None

    @property
    def idle(self) -> bool:
        """No packet for this host is in flight and the NIC has nothing queued."""
        return self.nic.free_at <= self.now() and all(q.idle for q in self.endpoints.values())

    def close(self) -> None:
        for qp in list(self.endpoints.values()):
            qp.close()
