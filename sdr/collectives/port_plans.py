"""Collective plans between datacenters: every channel is a ``"port"`` channel (SDR).

Between datacenters the data moves over SDR reliable writes driven by a host proxy, not
over mapped memory, so these plans name channel kind ``"port"``. They are ordinary plans of
the DSL (:class:`sdr.collectives.Program`) and pass the same compiler checks; only an
executor that owns port channels (``sdr.backends.hierarchical``) runs them. They register
as ``channel="port"`` algorithms (:mod:`sdr.collectives.algorithm_registry`), so users add
their own with ``register_algorithm(name, build, collective=..., channel="port")`` or a
``"port:<name>"`` entry point of the ``sdr.collective_algorithms`` group.

Pipelining: the data is cut into ``slices`` per ring chunk, and each slice is forwarded to
the next datacenter as soon as it arrived and was reduced, so stage ``r + 1`` of slice
``s`` overlaps stage ``r`` of slice ``s + 1`` (the ring recursion
``T(i, r) = max(T(i-1, r-1), T(i, r-1)) + t(i, r)`` then holds per slice, not per stage).

Algorithms (``n`` datacenters, world rank = datacenter index):

- ``allreduce_ring``: ``n - 1`` reduce-scatter stages then ``n - 1`` allgather stages,
  neighbours only (bandwidth-optimal; ``2(n-1)`` dependent WAN stages);
- ``allreduce_mesh``: every datacenter writes its whole input to every other and reduces
  locally in rank order (one WAN stage, ``n - 1`` times the bytes; the depth-1 tree);
- ``allgather_ring`` and ``reduce_scatter_ring``: the two halves of the ring on their own.

Port channel semantics the plans rely on: a ``put`` is a reliable write into the peer's
scratch; the peer knows from the plan which writes precede each ``signal``, so ``wait``
returns once those writes are verified complete.
"""

from __future__ import annotations

from collections.abc import Callable

from sdr.collectives.algorithm_registry import AlgorithmView, get_algorithm, register_algorithm
from sdr.collectives.dsl import Program
from sdr.collectives.plan import Channel, Plan
from sdr.errors import ConfigError

__all__ = ["PORT_ALGORITHMS", "as_port_plan", "build_port_plan"]


def as_port_plan(plan: Plan) -> Plan:
    """``plan`` with every channel of kind ``"port"`` (same ops; returns ``plan``)."""
    plan.channels = [Channel(c.rank, c.peer, "port") for c in plan.channels]
    return plan


def _check(n: int, slices: int) -> None:
    if n < 1:
        raise ConfigError(f"datacenters {n}; expected >= 1")
    if slices < 1:
        raise ConfigError(f"slices {slices}; expected >= 1")


def allreduce_ring(n: int, slices: int = 1) -> Plan:
    """Pipelined ring allreduce over ``n`` datacenters (see module docs)."""
    _check(n, slices)
    s_ = slices
    prog = Program(
        f"allreduce_ring_port_s{s_}",
        "allreduce",
        n,
        input=n * s_,
        output=n * s_,
        scratch=max(1, 2 * (n - 1) * s_),
    )
    for rp in prog.ranks():
        r = rp.rank
        if n == 1:
            rp.copy(rp.input(0, s_), rp.output(0, s_))
            continue
        right, left = (r + 1) % n, (r - 1) % n

        def idx(chunk: int, s: int) -> int:
            return (chunk % n) * s_ + s

        for s in range(s_):  # stage 0: my own chunk, straight from the input
            rp.put(rp.input(idx(r, s)), right, rp.scratch(s))
            rp.signal(right)
        for k in range(n - 1):  # reduce-scatter stages
            c = r - k - 1
            for s in range(s_):
                rp.wait(left)
                rp.reduce(rp.output(idx(c, s)), [rp.input(idx(c, s)), rp.scratch(k * s_ + s)])
                # forward: the next reduce-scatter stage, or (last) the first allgather stage
                rp.put(rp.output(idx(c, s)), right, rp.scratch((k + 1) * s_ + s))
                rp.signal(right)
        for k in range(n - 1):  # allgather stages: chunk r - k arrives complete
            c = r - k
            for s in range(s_):
                slot = (n - 1 + k) * s_ + s
                rp.wait(left)
                rp.copy(rp.scratch(slot), rp.output(idx(c, s)))
                if k < n - 2:
                    rp.put(rp.output(idx(c, s)), right, rp.scratch(slot + s_))
                    rp.signal(right)
    return as_port_plan(prog.compile())


def _mesh_slot(sender: int, receiver: int, slices: int, s: int) -> int:
    """Scratch chunk of ``receiver`` that ``sender``'s slice ``s`` lands in."""
    return (sender if sender < receiver else sender - 1) * slices + s


def allreduce_mesh(n: int, slices: int = 1) -> Plan:
    """One-shot allreduce over ``n`` datacenters: all-to-all writes, sum in rank order."""
    _check(n, slices)
    prog = Program(
        f"allreduce_mesh_port_s{slices}",
        "allreduce",
        n,
        input=slices,
        output=slices,
        scratch=max(1, (n - 1) * slices),
    )
    for rp in prog.ranks():
        r = rp.rank
        peers = prog.peers(r)

        for s in range(slices):
            for p in peers:
                rp.put(rp.input(s), p, rp.scratch(_mesh_slot(r, p, slices, s)))
                rp.signal(p)
        for s in range(slices):
            for p in peers:
                rp.wait(p)
            srcs = [
                rp.input(s) if q == r else rp.scratch(_mesh_slot(q, r, slices, s)) for q in range(n)
            ]
            if n == 1:
                rp.copy(rp.input(s), rp.output(s))
            else:
                rp.reduce(rp.output(s), srcs)  # rank order: every datacenter sums alike
    return as_port_plan(prog.compile())


def allgather_ring(n: int, slices: int = 1) -> Plan:
    """Pipelined ring allgather: output = every datacenter's input in rank order."""
    _check(n, slices)
    s_ = slices
    prog = Program(
        f"allgather_ring_port_s{s_}",
        "allgather",
        n,
        input=s_,
        output=n * s_,
        scratch=max(1, (n - 1) * s_),
        in_place=False,
    )
    for rp in prog.ranks():
        r = rp.rank
        right, left = (r + 1) % n, (r - 1) % n
        for s in range(s_):
            rp.copy(rp.input(s), rp.output(r * s_ + s))
            if n > 1:
                rp.put(rp.input(s), right, rp.scratch(s))
                rp.signal(right)
        for k in range(n - 1):
            c = (r - k - 1) % n
            for s in range(s_):
                rp.wait(left)
                rp.copy(rp.scratch(k * s_ + s), rp.output(c * s_ + s))
                if k < n - 2:
                    rp.put(rp.output(c * s_ + s), right, rp.scratch((k + 1) * s_ + s))
                    rp.signal(right)
    return as_port_plan(prog.compile())


def reduce_scatter_ring(n: int, slices: int = 1) -> Plan:
    """Pipelined ring reduce-scatter: datacenter ``r`` ends with chunk ``r`` of the sum."""
    _check(n, slices)
    s_ = slices
    prog = Program(
        f"reduce_scatter_ring_port_s{s_}",
        "reduce_scatter",
        n,
        input=n * s_,
        output=s_,
        scratch=max(1, 2 * (n - 1) * s_),
        in_place=False,
    )
    acc = (n - 1) * s_  # accumulators live after the receive slots
    for rp in prog.ranks():
        r = rp.rank
        right, left = (r + 1) % n, (r - 1) % n
        if n == 1:
            rp.copy(rp.input(0, s_), rp.output(0, s_))
            continue
        for s in range(s_):
            rp.put(rp.input(((r - 1) % n) * s_ + s), right, rp.scratch(s))
            rp.signal(right)
        for k in range(n - 1):
            c = (r - 2 - k) % n
            for s in range(s_):
                rp.wait(left)
                srcs = [rp.input(c * s_ + s), rp.scratch(k * s_ + s)]
                if k == n - 2:
                    rp.reduce(rp.output(s), srcs)
                    continue
                rp.reduce(rp.scratch(acc + k * s_ + s), srcs)
                rp.put(rp.scratch(acc + k * s_ + s), right, rp.scratch((k + 1) * s_ + s))
                rp.signal(right)
    return as_port_plan(prog.compile())


for _name, _collective, _build in (
    ("allreduce_ring", "allreduce", allreduce_ring),
    ("allreduce_mesh", "allreduce", allreduce_mesh),
    ("allgather_ring", "allgather", allgather_ring),
    ("reduce_scatter_ring", "reduce_scatter", reduce_scatter_ring),
):
    register_algorithm(_name, _build, collective=_collective, channel="port")

PORT_ALGORITHMS: AlgorithmView[Callable[[int, int], Plan]] = AlgorithmView(
    "port", lambda a: a.build
)
"""Read-only view, name -> generator(datacenters, slices), of every port algorithm
(registered in code with ``register_algorithm(..., channel="port")`` or by entry point)."""


def build_port_plan(name: str, datacenters: int, slices: int = 1) -> Plan:
    """The port plan ``name`` (a key of :data:`PORT_ALGORITHMS`) for ``datacenters``."""
    return get_algorithm(name, "port").build(datacenters, slices)
