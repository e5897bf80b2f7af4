"""Hierarchical collectives: memory channels inside a datacenter, SDR between datacenters.

Global rank ``g`` lives in datacenter ``d = g // local_size`` with local index
``l = g % local_size``. Every rank has an intra-datacenter communicator (its datacenter's
ranks, memory channels: :class:`sdr.backends.shm.ShmCommunicator` on CPUs) and an
inter-datacenter :class:`PortExecutor` over SDR port channels to the ranks with the same
local index in the other datacenters. As in NCCL's hierarchical algorithms, each local
rank carries one shard across the WAN, so all local ranks use the long-haul link at once:

- allreduce: reduce-scatter inside the datacenter (shard ``l``), allreduce of shard ``l``
  across datacenters (ring or mesh port plan, pipelined in slices), allgather inside;
- allgather: allgather across datacenters (ring), then inside, then reorder to rank order;
- reduce-scatter: reorder, reduce-scatter inside, then across datacenters (ring);
- allreduce_by (deadline-bounded mean): reduce-scatter inside, the deadline exchange of
  shard ``l`` across datacenters (:mod:`~sdr.backends.hierarchical.deadline_exchange`), the
  mean over the contributions that made it, allgather inside; what missed carries over.

Results are bitwise identical on every rank (each sum is computed once and copied), which
data-parallel training relies on.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from sdr.backends.collectives.dtypes import dtype_name
from sdr.backends.collectives.interfaces import Bootstrap
from sdr.backends.hierarchical.deadline_exchange import DeadlineExchange
from sdr.backends.hierarchical.links import SdrLinks
from sdr.backends.hierarchical.port_executor import PortExecutor
from sdr.collectives.deadline import (
    CarryOver,
    DeadlineReport,
    agree,
    combine,
    missed_part,
    slice_bounds,
)
from sdr.collectives.plan import Plan
from sdr.collectives.port_plans import build_port_plan
from sdr.errors import ConfigError

__all__ = ["HierarchicalCommunicator", "Topology"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Topology:
    """``datacenters`` x ``local_size`` ranks; ``rank`` is this process's global rank."""

    datacenters: int
    local_size: int
    rank: int

    def __post_init__(self) -> None:
        if self.datacenters < 1 or self.local_size < 1:
            raise ConfigError(
                f"topology {self.datacenters} x {self.local_size}; expected >= 1 each"
            )
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank}; expected 0 <= rank < {self.world_size}")

    @property
    def world_size(self) -> int:
        """All ranks of the job."""
        return self.datacenters * self.local_size

    @property
    def datacenter(self) -> int:
        """This rank's datacenter index."""
        return self.rank // self.local_size

    @property
    def local_rank(self) -> int:
        """This rank's index inside its datacenter."""
        return self.rank % self.local_size

    def wan_peers(self) -> dict[int, int]:
        """Global rank -> datacenter index of the ranks that share this local index."""
        return {d * self.local_size + self.local_rank: d for d in range(self.datacenters)}


def _carry_weight(carry: bool | float | str) -> float:
    """``carry`` of allreduce_by as the part of a missed slice carried on (nothing for
    ``"local"``: the caller keeps it)."""
    if carry == "local":
        return 0.0
    if carry is True or carry is False:
        return float(carry)
    if not isinstance(carry, int | float) or not 0 <= carry <= 1:
        raise ConfigError(
            f"carry must be True, False, 'local' or a weight in [0, 1], got {carry!r}"
        )
    return float(carry)


def _repairs(counters: dict[str, int]) -> int:
    """Data chunks sent again or repaired, summed over a rank's links."""
    return sum(v for k, v in counters.items() if "retransmitted" in k or "repaired" in k)


def _array_module(x: object) -> ModuleType:
    """NumPy, or CuPy for a CuPy array (imported only then)."""
    if type(x).__module__.startswith("cupy"):
        import cupy  # noqa: PLC0415 - optional dependency

        return cupy
    return np


class HierarchicalCommunicator:
    """Allreduce, allgather and reduce-scatter over datacenters x local ranks.

    ``intra``: the datacenter's communicator (``None`` when ``local_size == 1``), with
    ``allgather`` and ``reduce_scatter`` on NumPy arrays (ShmCommunicator, or a GPU one
    with host staging). ``links``: this rank's :class:`SdrLinks`. ``algorithm``: the WAN
    allreduce, ``"ring"`` or ``"mesh"``. ``slices``: pipeline depth of the WAN plans.
    ``bootstrap``: the job's bootstrap, closed with the communicator (None: not owned).
    """

    def __init__(
        self,
        topology: Topology,
        intra: object | None,
        links: SdrLinks,
        *,
        algorithm: str = "ring",
        slices: int = 4,
        bootstrap: Bootstrap | None = None,
    ) -> None:
        if algorithm not in ("ring", "mesh"):
            raise ConfigError(f"WAN algorithm {algorithm!r}; expected 'ring' or 'mesh'")
        if topology.local_size > 1 and intra is None:
            raise ConfigError("local_size > 1 needs an intra-datacenter communicator")
        self.topology = topology
        self.rank = topology.rank
        self.world_size = topology.world_size
        self.intra = intra
        self.links = links
        self.algorithm = algorithm
        self.bootstrap = bootstrap
        self.slices = slices
        self.executor = PortExecutor(
            links.port_rank, topology.datacenters, links.channels, links.ctx
        )
        self.timings: defaultdict[str, float] = defaultdict(float)
        """Seconds spent per phase (``intra``, ``wan``) over all calls."""
        self._plans: dict[str, Plan] = {}
        self._deadline = DeadlineExchange(links, topology.datacenter, topology.datacenters)
        self.carries: dict[object, CarryOver] = {}
        """What each deadline allreduce (by ``key``) still carries to its next call."""

    def _plan(self, name: str) -> Plan:
        if name not in self._plans:
            self._plans[name] = build_port_plan(name, self.topology.datacenters, self.slices)
        return self._plans[name]

    def _wan(self, name: str, x: np.ndarray, out: np.ndarray, dtype: str) -> np.ndarray:
        start = time.perf_counter()
        with self.links.exclusive():
            self.executor.run(self._plan(name), x, out, dtype)
        self.timings["wan"] += time.perf_counter() - start
        return out

    def _intra(self, method: str, x: np.ndarray, dtype: str) -> np.ndarray:
        start = time.perf_counter()
        result = getattr(self.intra, method)(x, dtype=dtype)
        self.timings["intra"] += time.perf_counter() - start
        return result

    # --- collectives ----------------------------------------------------------------------
    def allreduce(
        self, x: np.ndarray, out: np.ndarray | None = None, *, dtype: str | None = None
    ) -> np.ndarray:
        """Elementwise sum of every rank's ``x``, on every rank (``out`` may be ``x``).

        ``x`` may be a NumPy array, or a CuPy array when the intra-datacenter communicator
        is a GPU one: then both intra phases stay on the GPUs and only this rank's shard
        crosses to host memory for the WAN.
        """
        dt = dtype_name(x.dtype, dtype)
        xp = _array_module(x)
        out = xp.empty_like(x) if out is None else out
        if out.size != x.size:
            raise ConfigError(f"allreduce output has {out.size} elements; expected {x.size}")
        n, local = x.size, self.topology.local_size
        padded = xp.zeros(-(-n // local) * local, x.dtype)
        padded[:n] = x.reshape(-1)
        shard = self._intra("reduce_scatter", padded, dt) if local > 1 else padded
        # only the shard crosses to host memory (a CuPy shard copies down with .get())
        host = np.ascontiguousarray(shard if isinstance(shard, np.ndarray) else shard.get())
        self._wan(f"allreduce_{self.algorithm}", host, host, dt)
        shard = host if xp is np else xp.asarray(host)
        full = self._intra("allgather", shard, dt) if local > 1 else shard
        out.reshape(-1)[:] = full[:n]
        return out

    def allreduce_by(
        self,
        x: np.ndarray,
        deadline: float,
        *,
        slices: int = 8,
        key: object = None,
        withhold: tuple[int, ...] = (),
        average: str | None = None,
        carry: bool | float | str = True,
        out: np.ndarray | None = None,
        kept_out: np.ndarray | None = None,
    ) -> tuple[np.ndarray, DeadlineReport]:
        """The mean of every rank's ``x`` over what crossed the WAN within ``deadline``
        seconds of this call; ``(result, report)``. Bitwise identical on every rank.

        Inside a datacenter everything counts (its links are reliable and fast); across
        datacenters each rank's shard goes out in ``slices`` slices, and a datacenter's
        slice is in when every other datacenter had it, verified, at its deadline (one
        agreement round after the deadline settles this, the same on every rank). Each
        slice of the result is a mean: ``average="arrived"`` over the ranks whose
        contributions are in (never diluted by zeros; :attr:`DeadlineReport.counts`),
        ``"all"`` over every rank (default: ``"all"`` with carry-over, ``"arrived"``
        without). A slice of ours that is not in
        is carried over (error feedback): added to the next call with the same ``key``
        (default: one per shape and dtype), so nothing is lost, only delayed; ``carry=False``
        drops it instead (what a loss-tolerant transport does); a weight in (0, 1) carries
        that part of it (a staleness weight: steadier under an outer optimizer with
        momentum, no longer exact over a run); ``"local"`` carries nothing here and hands
        this rank's own part of what missed back in :attr:`DeadlineReport.kept`, for a
        training loop to keep locally (DiLoCo: the site starts its next inner steps from
        the shared model less it). With carry-over ``"all"``
        keeps the mean exact over a run (a late contribution counts once, when it comes);
        ``"arrived"`` would give the other ranks its weight for that step and it its own
        later (an outer optimizer sees more than the mean). ``withhold``: slices of this
        rank's shard to treat as late (fault injection). ``kept_out``: with ``"local"``,
        an array like ``x`` to hand the kept part back in (reuse one from call to call:
        its pages are in, where a fresh array's would fault between the decision and the
        result; with ``report.kept`` None what it holds is not promised: the kept part
        is made from a guess while the notes cross). NumPy arrays only.
        """
        start = time.perf_counter()
        begun = time.monotonic()
        until = begun + deadline
        dt = dtype_name(x.dtype, None)
        n, local, dcs = x.size, self.topology.local_size, self.topology.datacenters
        out = np.empty_like(x) if out is None else out
        if out.size != n:
            raise ConfigError(f"allreduce_by output has {out.size} elements; expected {n}")
        if kept_out is not None and (
            kept_out.shape != x.shape
            or kept_out.dtype != x.dtype
            or not kept_out.flags.c_contiguous
        ):
            raise ConfigError(
                f"kept_out must be a contiguous {x.dtype} array of shape {x.shape}, got "
                f"{kept_out.dtype} {kept_out.shape}"
            )
        # the receives (and so our clear-to-sends) first: they date our entry at the peers
        opened = (
            self._deadline.open(-(-n // local), x.dtype, slices, begun, withhold)
            if dcs > 1
            else None
        )
        padded = np.zeros(-(-n // local) * local, x.dtype)
        padded[:n] = x.reshape(-1)
        shard = self._intra("reduce_scatter", padded, dt) if local > 1 else padded
        weight = _carry_weight(carry)
        name = (x.shape, x.dtype.str) if key is None else key
        carried = self.carries.setdefault(name, CarryOver())
        carried.weight = weight
        sent = carried.add_to(np.ascontiguousarray(shard))
        repairs = _repairs(self.links.counters())
        if average is None:  # exact over a run with carry-over; undiluted without
            average = "all" if weight or carry == "local" else "arrived"
        early: list[tuple[np.ndarray, np.ndarray]] = []
        early_kept: list[np.ndarray | None] = []
        # one rank per datacenter: the mean is made where the caller wants it (``padded``
        # holds ``x`` from here on), not copied there after the decision (1-2 ms of it)
        direct = out.reshape(-1) if local == 1 and out.flags.c_contiguous else None
        own = padded.reshape(x.shape)  # x itself may be the output, overwritten

        def while_waiting(contributions: list[np.ndarray | None], guess: np.ndarray) -> None:
            # the peers' notes take half a round trip: combine meanwhile from what this
            # rank can tell, and after them redo only the slices the guess got wrong
            # (the kept part too, with one rank per datacenter: 1 ms of local carry's)
            included = agree(guess)
            bounds = slice_bounds(sent.size, guess.shape[2])
            mean = combine(contributions, included, bounds, local, average, out=direct)[0]
            early.append((included, mean))
            if carry == "local" and local == 1:
                early_kept.append(self._kept(own, included, sent.size, kept_out))

        wan = time.perf_counter()
        # the progress thread stands by from the exchange until the result is made: it
        # would take the lock between them for a round over the packets the cut left on
        # the link, and the GIL between NumPy's steps (up to a 5 ms switch interval each)
        with self.links.exclusive():
            if dcs > 1:
                contributions, arrived, slices = self._deadline.run(
                    sent, slices, until, withhold, grace=deadline, opened=opened,
                    while_waiting=while_waiting,
                )  # fmt: skip
            else:
                contributions, slices = [sent], max(1, min(slices, sent.size))
                arrived = np.ones((1, 1, slices), bool)
            included = agree(arrived)
            bounds = slice_bounds(sent.size, slices)
            if early:
                guessed, mean = early[0]
                wrong = (guessed != included).any(axis=0)
                mean, counts = combine(
                    contributions, included, bounds, local, average, out=mean, only=wrong
                )
            else:
                mean, counts = combine(contributions, included, bounds, local, average, out=direct)
            if weight:
                carried.settle(sent, included[self.topology.datacenter], bounds)
            else:
                carried.clear()
            if local == 1:  # no step inside the datacenter: all of it here
                from_guess = (early[0][0], early_kept[0]) if early_kept else None
                kept = (
                    self._kept(own, included, sent.size, kept_out, from_guess)
                    if carry == "local"
                    else None
                )
                if mean is not direct:
                    out.reshape(-1)[:] = mean[:n]
        self.timings["wan"] += time.perf_counter() - wan
        if local > 1:
            kept = self._kept(x, included, sent.size, kept_out) if carry == "local" else None
            out.reshape(-1)[:] = self._intra("allgather", mean, dt)[:n]
        sizes = np.diff(bounds) * sent.itemsize
        return out, DeadlineReport(
            deadline_s=deadline,
            seconds=time.perf_counter() - start,
            slices=slices,
            included=included,
            counts=counts,
            bytes_in=int((included * sizes).sum()),
            bytes_total=int(dcs * sizes.sum()),
            repairs=_repairs(self.links.counters()) - repairs,
            carried=carried.residual is not None,
            timeline=(
                {**self._deadline.timeline, "done": time.monotonic() - begun} if dcs > 1 else {}
            ),
            kept=kept,
        )

    def _kept(
        self,
        x: np.ndarray,
        included: np.ndarray,
        shard: int,
        out: np.ndarray | None,
        guessed: tuple[np.ndarray, np.ndarray | None] | None = None,
    ) -> np.ndarray | None:
        """``x`` where this datacenter's contribution is not in (every local rank's shard
        mask, gathered inside the datacenter), zero elsewhere, in ``out`` when given; None
        when all of it is in (``out`` may then hold a guess's). ``guessed``: the
        ``included`` of a guess and what this returned for it (one rank per datacenter):
        only the slices where the two differ are redone."""
        me = self.topology.datacenter
        mine = included[me].astype(np.float32)
        rows = self._intra("allgather", mine, "float32") if self.topology.local_size > 1 else mine
        mine_in = rows.reshape(self.topology.local_size, -1) > 0
        if guessed is not None and guessed[1] is not None and not mine_in.all():
            was = guessed[0][me].reshape(mine_in.shape)
            missed_part(x.reshape(-1), mine_in, shard, guessed[1].reshape(-1), only=was != mine_in)
            return guessed[1]
        flat = None if out is None else out.reshape(-1)
        kept = missed_part(x.reshape(-1), mine_in, shard, flat)
        if kept is None:
            return None
        return out if out is not None else kept.reshape(x.shape)

    def allgather(
        self, x: np.ndarray, out: np.ndarray | None = None, *, dtype: str | None = None
    ) -> np.ndarray:
        """Every rank's ``x`` concatenated in global rank order, on every rank."""
        dt = dtype_name(x.dtype, dtype)
        n, dcs, local = x.size, self.topology.datacenters, self.topology.local_size
        out = np.empty(n * self.world_size, x.dtype) if out is None else out
        if out.size != n * self.world_size:
            raise ConfigError(
                f"allgather output has {out.size} elements; expected {n * dcs * local}"
            )
        # plans cut each rank's block into `slices` equal chunks: pad the block to fit
        m = -(-n // self.slices) * self.slices
        mine = np.zeros(m, x.dtype)
        mine[:n] = x.reshape(-1)
        across = np.empty(m * dcs, x.dtype)
        self._wan("allgather_ring", mine, across, dt)
        both = self._intra("allgather", across, dt) if local > 1 else across
        blocks = both.reshape(local, dcs, m)[:, :, :n]
        out.reshape(-1)[:] = blocks.transpose(1, 0, 2).reshape(-1)
        return out

    def reduce_scatter(
        self, x: np.ndarray, out: np.ndarray | None = None, *, dtype: str | None = None
    ) -> np.ndarray:
        """Chunk ``rank`` (of ``world_size`` equal chunks) of the elementwise sum."""
        dt = dtype_name(x.dtype, dtype)
        dcs, local = self.topology.datacenters, self.topology.local_size
        if x.size % self.world_size:
            raise ConfigError(f"reduce_scatter of {x.size} elements over {self.world_size} ranks")
        n = x.size // self.world_size
        out = np.empty(n, x.dtype) if out is None else out
        if out.size != n:
            raise ConfigError(f"reduce_scatter output has {out.size} elements; expected {n}")
        by_local = np.ascontiguousarray(x.reshape(dcs, local, n).transpose(1, 0, 2).reshape(-1))
        mine = self._intra("reduce_scatter", by_local, dt) if local > 1 else by_local
        m = -(-n // self.slices) * self.slices  # equal slices per datacenter block
        padded = np.zeros((dcs, m), x.dtype)
        padded[:, :n] = mine.reshape(dcs, n)
        result = np.empty(m, x.dtype)
        self._wan("reduce_scatter_ring", padded.reshape(-1), result, dt)
        out.reshape(-1)[:] = result[:n]
        return out

    def barrier(self) -> None:
        """Every rank of the job meets (through the intra communicator and a WAN allreduce)."""
        self.allreduce(np.zeros(1, np.float32))

    def close(self) -> None:
        """Drain the SDR links collectively, then release shared memory and sockets."""
        try:
            self.links.close()
        finally:
            if self.intra is not None:
                self.intra.close()  # type: ignore[attr-defined]
            if self.bootstrap is not None:
                self.bootstrap.close()
