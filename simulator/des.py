"""Discrete-event simulation of the real SDR protocol code over a modelled link (simpy).

Where the analytic model and Monte Carlo sample a formula, this runs the SDK itself: an
``sdr.Context`` per host on a simulated transport (:mod:`sdr.simulator.des_transport`), the
real :class:`sdr.ReliableQP` and scheme state machines on top, driven by simpy
processes on simulated time (:mod:`sdr.simulator.des_driver`). The link is the SDK's one
link model (:mod:`sdr.simulator.link_model`, scheduled by :mod:`sdr.simulator.des_link`): it
serializes packets at the line rate through a drop-tail switch queue, delays them by the
propagation time, drops them with any loss model (Bernoulli, Gilbert-Elliott bursts, traces;
data and control path separately) and can reorder them.
EC encoding can take simulated time (:mod:`sdr.simulator.des_encode`).

A sample is one write: the receiver posts its receive, its CTS reaches the sender, the
sender writes; the sample's time runs from ``write()`` to the sender's completion (the
receiver's ACK arrived), the quantity the completion-time model predicts. Samples run one
after the other on one pair of QPs, each on a quiet link.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import sdr
from sdr.errors import ConfigError
from sdr.reliability import ReliabilityConfig
from sdr.runtime import ReceiveHandle, ReliableQP, WriteHandle
from sdr.simulator.des_driver import DesHost, DesSim
from sdr.simulator.des_encode import with_encode_time
from sdr.simulator.des_link import PathBlackouts, check_path_blackouts
from sdr.simulator.des_losslog import LossLog
from sdr.simulator.link import DropUnit, Link
from sdr.simulator.link_spec import LinkSpec
from sdr.simulator.loss import Bernoulli, LossModel
from sdr.simulator.schemes import SchemeSpec

__all__ = [
    "DesOptions",
    "DesRun",
    "packet_loss",
    "qp_attr",
    "reliability_config",
    "simulate_writes",
    "simulate_flows",
]


@dataclass(frozen=True)
class DesOptions:
    """What the simulation models beyond i.i.d. data loss (defaults: the model's link).

    Attributes:
        control_loss: loss model of control messages in both directions (CTS, DIGEST,
            SACK, ACK, NACK); None: the control path is lossless.
        reorder: probability a packet (data or control) is held back.
        reorder_jitter: a held-back packet arrives up to this much later, uniform, in
            seconds (``LinkSpec.reorder_jitter``; default: 8 packet times).
        queue: switch queue per direction in bytes (``LinkSpec.queue``; default:
            ``link.queue``, the link's alpha RTTs of line rate).
        header_bytes: wire bytes added per packet (default 0, as the model counts).
        encode_s_per_byte: EC encode time per data byte (0: free).
        copy_payload: place real bytes and check them after each write (slower).
        nic_queue_packets: packets a NIC accepts ahead of its wire (default: one chunk).
        congestion: the senders' congestion controller (``fixed``: pace at the NIC's
            rate; ``delay``, ``bbr``, ``auto``: the SDK's own controller code, started at
            the link rate).
        congestion_params: its parameters (``ReliabilityConfig.congestion_params``).
        paths: QP channels; more than one turns multipath on (``ReliabilityConfig.
            multipath``: each chunk takes one path, picked by the SDK's path selector).
            The paths share the one link; they differ only by their blackouts.
        path_blackouts: per path, ``(start, end)`` intervals of simulated time in seconds
            during which that path drops every data packet, in both directions
            (:data:`~sdr.simulator.des_link.PathBlackouts`; control messages take path 0,
            so a blackout of path 0 is an outage of the whole link).

    Each direction of the simulated link is the :class:`LinkSpec` that :meth:`spec` makes.
    """

    control_loss: LossModel | None = None
    reorder: float = 0.0
    reorder_jitter: float | None = None
    queue: float | None = None
    header_bytes: int = 0
    encode_s_per_byte: float = 0.0
    copy_payload: bool = False
    nic_queue_packets: int | None = None
    congestion: str = "fixed"
    congestion_params: dict[str, Any] = field(default_factory=dict)
    paths: int = 1
    path_blackouts: PathBlackouts = ()

    def __post_init__(self) -> None:
        paths = self.paths
        if isinstance(paths, bool) or not isinstance(paths, int) or not 1 <= paths <= 16:
            raise ConfigError(f"paths must be an integer in [1, 16], got {paths!r}")
        blackouts = check_path_blackouts(self.path_blackouts)
        if len(blackouts) > paths:
            raise ConfigError(
                f"path_blackouts name {len(blackouts)} paths but there are {paths} (set paths)"
            )
        object.__setattr__(self, "path_blackouts", blackouts)

    def spec(self, link: Link, loss: LossModel | None) -> LinkSpec:
        """One direction of ``link`` with ``loss`` on its data packets and these options."""
        jitter = self.reorder_jitter
        if jitter is None:
            jitter = 8 * link.serialization_s(link.mtu + self.header_bytes) if self.reorder else 0.0
        return LinkSpec.from_link(
            link,
            queue=self.queue,
            loss=loss,
            control_loss=self.control_loss,
            reorder=self.reorder,
            reorder_delay=0.0,
            reorder_jitter=jitter,
        )


@dataclass
class DesRun:
    """Outcome of simulated writes (times in seconds, one entry per write)."""

    times_s: np.ndarray
    """Sender completion: from ``write()`` to the receiver's ACK at the sender."""
    receive_times_s: np.ndarray
    """Receiver completion: from ``write()`` to the verified receive."""
    fell_back: np.ndarray | None
    """EC: whether the receiver needed the SR fallback (None for SR schemes)."""
    retransmissions: np.ndarray
    failed: int
    """Writes that failed (e.g. the global timeout); their times are when they failed."""
    correct: bool | None
    """With ``copy_payload``: every receive buffer equalled its write; else None."""
    events: int
    """simpy events processed."""
    wall_s: float
    cpu_s: float
    """Process CPU time of the run (less sensitive than wall time to a busy machine)."""
    sim_s: float
    link: dict[str, Any] = field(default_factory=dict)
    """Per direction (``"a->b"``, ``"b->a"``): the link's counters
    (:class:`~sdr.simulator.link_model.LinkStats`: packets, queue_drops, loss_drops,
    control_lost, reordered, max_backlog_bytes ...)."""
    chunk_losses: list[tuple[np.ndarray, np.ndarray | None]] = field(default_factory=list)
    """Per write: lost transmissions of each data chunk and each parity chunk (EC)."""

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def wall_per_write_s(self) -> float:
        return self.wall_s / max(len(self.times_s), 1)


def packet_loss(link: Link, drop: float, unit: DropUnit = "chunk") -> Bernoulli:
    """I.i.d. per-packet losses that lose a chunk with probability ``drop`` per ``unit``.

    The simulation draws losses per packet; a per-chunk rate ``p`` becomes
    ``1 - (1 - p)^(1/N)`` per packet for N packets per chunk, so chunks are lost i.i.d.
    with exactly probability ``p`` (the model's assumption).
    """
    p_chunk = link.chunk_drop(drop, unit)
    return Bernoulli(float(-np.expm1(np.log1p(-p_chunk) / link.packets_per_chunk)), "packet")


def reliability_config(link: Link, spec: SchemeSpec) -> ReliabilityConfig:
    """The SDK's reliability config that matches ``spec`` on ``link``.

    RTO = ``rto_rtts`` RTTs (alpha = rto_rtts - 1); for ``sr-nack``, which uses real
    NACKs, it is only the backstop for lost tails and NACKs. EC: beta = the link's
    alpha / 2.
    """
    rto_rtts = spec.resolved_rto_rtts(link)
    return ReliabilityConfig(
        scheme=spec.name,
        rtt=link.rtt,
        alpha=rto_rtts - 1.0,
        beta=link.beta,
        k=spec.k,
        m=spec.m,
        chunk_size=link.chunk_size,
        link_rate=link.rate,
    )


def qp_attr(link: Link, size_bytes: int, spec: SchemeSpec, channels: int = 1) -> sdr.QPAttr:
    """QP attributes for writes of ``size_bytes`` (the MTU and chunk of the link) over
    ``channels`` paths."""
    chunks = link.num_chunks(size_bytes)
    parity = -(-chunks // spec.k) * spec.m * link.chunk_size if spec.is_ec else 0
    largest = max(size_bytes, parity)
    return sdr.QPAttr(
        mtu=link.mtu,
        chunk_size=link.chunk_size,
        max_message_size=-(-largest // link.mtu) * link.mtu,
        max_messages=15,  # odd: see sdr.id_reuse
        channels=channels,
    )


def _new_sim(link: Link, loss: LossModel | None, seed: int | None, opts: DesOptions) -> DesSim:
    if isinstance(loss, Bernoulli) and loss.unit == "chunk":
        loss = packet_loss(link, loss.p, "chunk")
    return DesSim(
        link,
        forward=opts.spec(link, loss),
        reverse=opts.spec(link, None),
        path_blackouts=opts.path_blackouts,
        seed=seed,
        header_bytes=opts.header_bytes,
        copy_payload=opts.copy_payload,
        nic_queue_packets=opts.nic_queue_packets,
    )


def _pair(
    sim: DesSim, a: DesHost, b: DesHost, link: Link, size: int, spec: SchemeSpec, opts: DesOptions
) -> tuple[ReliableQP, ReliableQP]:
    config = reliability_config(link, spec).replace(
        congestion=opts.congestion,
        congestion_params=opts.congestion_params,
        multipath=opts.paths > 1,
    )
    ra, rb = sim.reliable_pair(a, b, qp_attr(link, size, spec, opts.paths), config)
    with_encode_time(ra.scheme, a.transport.now, opts.encode_s_per_byte)
    return ra, rb


@dataclass
class _Flow:
    """One sender/receiver pair and what its writes measured."""

    a: DesHost
    b: DesHost
    ra: ReliableQP
    rb: ReliableQP
    src: np.ndarray
    dst: np.ndarray
    times: list[float] = field(default_factory=list)
    receive_times: list[float] = field(default_factory=list)
    fell_back: list[bool] = field(default_factory=list)
    retransmissions: list[int] = field(default_factory=list)
    failed: int = 0
    correct: bool = True
    log: LossLog | None = None


def _finished(handle: WriteHandle | ReceiveHandle) -> Callable[[], bool]:
    """``handle.finished`` as a :meth:`DesSim.until` condition, bound to this handle (a
    waiter can outlive the loop iteration that made it)."""
    return lambda: handle.finished


def _writes(
    sim: DesSim, flow: _Flow, writes: int, rng: np.random.Generator, verify: bool, settle: bool
) -> Generator[Any, Any, None]:
    """Scenario process: ``writes`` writes on one flow, one after the other."""
    env, cts_wait = sim.env, sim.link.one_way_delay * 1.01 + 1e-6
    mr_src, mr_dst = flow.a.ctx.register(flow.src), flow.b.ctx.register(flow.dst)
    lanes = flow.ra.scheme.lanes(flow.src.size)
    flow.log = LossLog(flow.ra.qp.transport_qp, mr_src, sim.link.chunk_size)  # type: ignore[arg-type]
    for _ in range(writes):
        if verify:
            flow.src[:] = rng.integers(0, 256, flow.src.size, dtype=np.uint8)
            flow.dst[:] = 0
        rh = flow.rb.post_recv(mr_dst)
        flow.b.kick()
        yield env.timeout(cts_wait)  # the CTS lands first (unless it is lost)
        start = env.now
        flow.log.start(lanes[0], lanes[1] if len(lanes) > 1 else 0)
        wh = flow.ra.write(mr_src)
        sim.watch(wh)
        sim.watch(rh)
        flow.a.kick()
        yield sim.until(_finished(wh))
        # a receiver that never saw the write has no timer of its own: give it up after
        # its global timeout (the write is counted failed)
        grace = env.timeout(flow.rb.config.timeout_for(rh.length))
        yield sim.until(_finished(rh)) | grace
        flow.times.append(sim.finished_at[id(wh)] - start)
        flow.receive_times.append(sim.finished_at.get(id(rh), env.now) - start)
        flow.fell_back.append(rh.stats.get("fallbacks", 0) > 0)
        flow.retransmissions.append(wh.stats.get("chunks_retransmitted", 0))
        flow.failed += int(not (wh.done and rh.done))
        flow.log.finish()
        if verify:
            flow.correct &= bool(np.array_equal(flow.src, flow.dst))
        if settle:
            yield from sim.quiet()


def _run(
    sim: DesSim, flows: list[_Flow], spec: SchemeSpec, wall: float, cpu: float
) -> list[DesRun]:
    stats = {site: d.stats.as_dict() for site, d in sim.fabric.directions.items()}
    link = {"a->b": stats["a"], "b->a": stats["b"]}
    out = []
    for f in flows:
        out.append(
            DesRun(
                times_s=np.array(f.times),
                receive_times_s=np.array(f.receive_times),
                fell_back=np.array(f.fell_back) if spec.is_ec else None,
                retransmissions=np.array(f.retransmissions),
                failed=f.failed,
                correct=f.correct if sim.fabric.copy_payload else None,
                events=sim.events,
                wall_s=wall,
                cpu_s=cpu,
                sim_s=float(sim.env.now),
                link=link,
                chunk_losses=f.log.writes if f.log else [],
            )
        )
    return out


def simulate_writes(
    link: Link,
    size_bytes: int,
    spec: SchemeSpec,
    loss: LossModel | None,
    *,
    samples: int = 100,
    seed: int | None = 0,
    options: DesOptions | None = None,
) -> DesRun:
    """Simulate ``samples`` independent writes of ``size_bytes`` with the real protocol.

    ``loss`` acts on data packets from sender to receiver (a per-chunk Bernoulli is
    converted with :func:`packet_loss`); ``options`` adds control-path loss, reordering,
    a smaller switch buffer, headers and encode time.
    """
    return simulate_flows(
        link, size_bytes, spec, loss, flows=1, writes=samples, seed=seed, options=options
    )[0]


def simulate_flows(
    link: Link,
    size_bytes: int,
    spec: SchemeSpec,
    loss: LossModel | None,
    *,
    flows: int = 2,
    writes: int = 10,
    seed: int | None = 0,
    options: DesOptions | None = None,
    nic_rate: float | None = None,
) -> list[DesRun]:
    """Several reliable flows (one sender and one receiver host each) share one link.

    All senders sit at site a and feed the same switch queue; each NIC sends at
    ``nic_rate`` bits/s (default: the link rate, so two or more flows overload the queue, as
    SDR has no congestion control). Every flow makes ``writes`` writes back to back; the
    link is not left to drain between them. Returns one :class:`DesRun` per flow.
    """
    if flows < 1 or writes < 1:
        raise ConfigError(f"need flows >= 1 and writes >= 1, got {flows} and {writes}")
    if size_bytes < 1:
        raise ConfigError(f"write size must be >= 1 byte, got {size_bytes!r}")
    opts = options or DesOptions()
    sim = _new_sim(link, loss, seed, opts)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])
    made = []
    for _ in range(flows):
        a, b = sim.host("a", nic_rate), sim.host("b")
        ra, rb = _pair(sim, a, b, link, size_bytes, spec, opts)
        src, dst = np.zeros(size_bytes, np.uint8), np.zeros(size_bytes, np.uint8)
        made.append(_Flow(a, b, ra, rb, src, dst))
    settle = flows == 1
    procs = [sim.env.process(_writes(sim, f, writes, rng, opts.copy_payload, settle)) for f in made]
    started, cpu = time.perf_counter(), time.process_time()
    sim.env.run(until=sim.env.all_of(procs))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return _run(sim, made, spec, wall, cpu)
