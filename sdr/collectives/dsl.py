"""The collective DSL: write per-rank chunk operations in Python, compile them to a Plan.

Example (a one-shot allreduce over LL packets, any world size)::

    prog = Program("allreduce_demo", "allreduce", world_size=n, input=1, output=1, packets=n)
    for r in prog.ranks():
        for p in prog.peers(r):
            r.put(r.input(0), p, r.packets(r.rank))        # my data -> peer's packet slot
        r.reduce(r.output(0), [r.input(0)] + [r.packets(p) for p in prog.peers(r)])
    plan = prog.compile()

The compiler checks what the executors rely on and raises ConfigError otherwise:

- every ``signal`` from a to b is matched by a ``wait`` of b on a;
- a rank reads scratch that a peer wrote only after waiting for the signal that follows
  the write, and reads exactly the chunks the peer wrote (GPU executors split an op into
  per-block slices by its size, so writer and reader must agree on the range);
- every packets chunk that is read was written exactly once in the plan;
- a rank that writes to a peer also hears from it in the same call (so a rank can never
  run two calls ahead and overwrite a double-buffered region still being read);
- where one rank touches the same local bytes through differently shaped ranges, a
  ``barrier`` is inserted (GPU thread blocks would otherwise race).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from sdr.collectives.plan import COLLECTIVES, Channel, ChunkRef, Op, Plan, validate_plan
from sdr.errors import ConfigError


class RankProgram:
    """The op list of one rank while a program is being written."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.ops: list[Op] = []

    # chunk references -------------------------------------------------------------
    def input(self, index: int, count: int = 1) -> ChunkRef:
        """Chunks of this rank's input buffer."""
        return ChunkRef("input", index, count)

    def output(self, index: int, count: int = 1) -> ChunkRef:
        """Chunks of this rank's output buffer."""
        return ChunkRef("output", index, count)

    def scratch(self, index: int, count: int = 1, rank: int | None = None) -> ChunkRef:
        """Chunks of a scratch buffer: this rank's, a peer's as put destination, or rank
        ``rank``'s as a ``reduce`` source read through the memory channel."""
        return ChunkRef("scratch", index, count, rank)

    def packets(self, index: int, count: int = 1) -> ChunkRef:
        """Chunks of an LL packet buffer (a peer's as put destination, this rank's to read)."""
        return ChunkRef("packets", index, count)

    # operations ---------------------------------------------------------------------
    def put(self, src: ChunkRef, peer: int, dst: ChunkRef) -> None:
        """Copy local ``src`` into ``peer``'s ``dst`` (scratch, or packets: LL with flag)."""
        self.ops.append(Op("put", dst, (src,), peer))

    def get(self, peer: int, src: ChunkRef, dst: ChunkRef) -> None:
        """Copy ``peer``'s scratch ``src`` into local ``dst``."""
        self.ops.append(Op("get", dst, (src,), peer))

    def copy(self, src: ChunkRef, dst: ChunkRef) -> None:
        """Local copy; a ``packets`` source waits for its flags (unpacks)."""
        self.ops.append(Op("copy", dst, (src,)))

    def reduce(self, dst: ChunkRef, srcs: Iterable[ChunkRef]) -> None:
        """``dst = sum(srcs)`` elementwise; ``packets`` sources wait for their flags."""
        self.ops.append(Op("reduce", dst, tuple(srcs)))

    def signal(self, peer: int) -> None:
        """Make prior puts to ``peer`` visible, then bump ``peer``'s semaphore for us."""
        self.ops.append(Op("signal", peer=peer))

    def wait(self, peer: int) -> None:
        """Wait for the next signal from ``peer``."""
        self.ops.append(Op("wait", peer=peer))

    def flush(self, peer: int) -> None:
        """Wait until prior puts to ``peer`` have landed (no peer notification)."""
        self.ops.append(Op("flush", peer=peer))

    def barrier(self) -> None:
        """All workers (GPU thread blocks) of this rank meet here."""
        self.ops.append(Op("barrier"))


class Program:
    """A collective program under construction: one :class:`RankProgram` per rank."""

    def __init__(
        self,
        name: str,
        collective: str,
        world_size: int,
        *,
        input: int,  # noqa: A002 - buffer names are the vocabulary of the DSL
        output: int,
        scratch: int = 0,
        packets: int = 0,
        in_place: bool = True,
        root: int | None = None,
    ) -> None:
        if collective not in COLLECTIVES:
            raise ConfigError(f"collective {collective!r}; expected one of {COLLECTIVES}")
        if world_size < 1:
            raise ConfigError(f"world_size {world_size}; expected >= 1")
        self.name = name
        self.collective = collective
        self.world_size = world_size
        self.chunks = {"input": input, "output": output, "scratch": scratch, "packets": packets}
        self.in_place = in_place
        self.root = root
        self._ranks = [RankProgram(r) for r in range(world_size)]

    def ranks(self) -> Iterator[RankProgram]:
        """Every rank's program, in rank order."""
        return iter(self._ranks)

    def rank(self, r: int) -> RankProgram:
        """The program of rank ``r``."""
        return self._ranks[r]

    def peers(self, r: RankProgram | int) -> list[int]:
        """All ranks except ``r``, in rank order."""
        me = r.rank if isinstance(r, RankProgram) else r
        return [p for p in range(self.world_size) if p != me]

    def compile(self) -> Plan:
        """Check the program and emit its :class:`Plan` (barriers inserted where needed)."""
        ranks = [_insert_barriers(rp.ops) for rp in self._ranks]
        pairs = {(r, op.peer) for r, ops in enumerate(ranks) for op in ops if op.peer is not None}
        pairs |= {
            (r, s.rank)
            for r, ops in enumerate(ranks)
            for op in ops
            for s in op.srcs
            if s.rank is not None
        }
        channels = sorted(pairs)
        plan = Plan(
            name=self.name,
            collective=self.collective,
            world_size=self.world_size,
            chunks=dict(self.chunks),
            ranks=ranks,
            channels=[Channel(a, b) for a, b in channels],
            in_place=self.in_place,
            root=self.root,
        )
        validate_plan(plan)
        check_plan(plan)
        return plan


def _overlap(a: ChunkRef, b: ChunkRef) -> bool:
    return a.index < b.index + b.count and b.index < a.index + a.count


def _insert_barriers(ops: list[Op]) -> list[Op]:
    """Insert a barrier before an op that touches bytes seen since the last barrier through
    a differently shaped range (thread blocks split ops by range, so shapes must match)."""
    out: list[Op] = []
    seen: list[ChunkRef] = []
    for op in ops:
        if op.kind == "barrier":
            seen = []
            out.append(op)
            continue
        local = [r for r in op.srcs if r.rank is None] if op.kind != "get" else []
        if op.dst is not None and op.kind != "put":
            local.append(op.dst)
        if any(s.buffer == r.buffer and _overlap(s, r) and s != r for r in local for s in seen):
            out.append(Op("barrier"))
            seen = []
        seen.extend(local)
        out.append(op)
    return out


def _peer(op: Op) -> int:
    """The peer of a put/get/signal/wait/flush; validate_plan rejects such an op without one."""
    if op.peer is None:
        raise ConfigError(f"{op.kind} op has no peer; run validate_plan first")
    return op.peer


def check_plan(plan: Plan) -> None:
    """Happens-before and matching checks over the whole plan (see module docs)."""
    n = plan.world_size
    signals: Counter[tuple[int, int]] = Counter()
    waits: Counter[tuple[int, int]] = Counter()
    # (writer, reader, ChunkRef) -> signal number (1-based) that publishes the write
    scratch_writes: dict[tuple[int, ChunkRef], tuple[int, int]] = {}
    packet_writes: Counter[tuple[int, ChunkRef]] = Counter()
    # (owner, ChunkRef) -> {reader: signal number} for scratch a rank writes into its own
    own_writes: dict[tuple[int, ChunkRef], dict[int, int]] = {}
    for r, ops in enumerate(plan.ranks):
        for op in ops:
            writes_own = op.kind in ("copy", "reduce", "get")
            if writes_own and op.dst is not None and op.dst.buffer == "scratch":
                own_writes[(r, op.dst)] = {
                    q: signals[(r, q)] + 1 for q in range(plan.world_size) if q != r
                }
            if op.kind == "signal":
                signals[(r, _peer(op))] += 1
            elif op.kind == "put" and op.dst is not None:
                key = (_peer(op), op.dst)
                if op.dst.buffer == "packets":
                    packet_writes[key] += 1
                else:
                    scratch_writes[key] = (r, signals[(r, _peer(op))] + 1)
    for r, ops in enumerate(plan.ranks):
        for op in ops:
            if op.kind == "wait":
                waits[(_peer(op), r)] += 1
    for pair in set(signals) | set(waits):
        if signals[pair] != waits[pair]:
            a, b = pair
            raise ConfigError(
                f"{plan.name}: rank {a} signals rank {b} {signals[pair]} times but rank {b} "
                f"waits {waits[pair]} times"
            )
    for (reader, ref), count in packet_writes.items():
        if count != 1:
            raise ConfigError(f"{plan.name}: rank {reader}'s packets {ref} written {count}x")
    _check_reads(plan, scratch_writes, packet_writes)
    _check_remote_reads(plan, own_writes)
    _check_two_way(plan, n)


def _check_reads(
    plan: Plan,
    scratch_writes: dict[tuple[int, ChunkRef], tuple[int, int]],
    packet_writes: Counter[tuple[int, ChunkRef]],
) -> None:
    for r, ops in enumerate(plan.ranks):
        waited: Counter[int] = Counter()
        for i, op in enumerate(ops):
            if op.kind == "wait":
                waited[_peer(op)] += 1
            if op.kind not in ("copy", "reduce", "put"):
                continue
            for src in op.srcs:
                if src.rank is not None:
                    continue  # a peer's scratch: _check_remote_reads
                if src.buffer == "packets" and packet_writes[(r, src)] != 1:
                    raise ConfigError(
                        f"{plan.name}: rank {r} op {i} reads packets {src} that no peer wrote"
                    )
                if src.buffer != "scratch":
                    continue
                for (reader, ref), (writer, sig) in scratch_writes.items():
                    if reader != r or not _overlap(ref, src):
                        continue
                    if ref != src:
                        raise ConfigError(
                            f"{plan.name}: rank {r} op {i} reads scratch {src} but rank "
                            f"{writer} wrote {ref}; read exactly the chunks written"
                        )
                    if waited[writer] < sig:
                        raise ConfigError(
                            f"{plan.name}: rank {r} op {i} reads scratch {src} before waiting "
                            f"for rank {writer}'s signal #{sig}"
                        )


def _check_remote_reads(plan: Plan, own_writes: dict[tuple[int, ChunkRef], dict[int, int]]) -> None:
    """A reduce that reads a peer's scratch must read exactly what the peer wrote there, after
    waiting for the peer's signal that follows the write."""
    for r, ops in enumerate(plan.ranks):
        waited: Counter[int] = Counter()
        for i, op in enumerate(ops):
            if op.kind == "wait":
                waited[_peer(op)] += 1
            for src in op.srcs if op.kind == "reduce" else ():
                if src.rank is None:
                    continue
                sigs = own_writes.get((src.rank, src.local()))
                if sigs is None:
                    raise ConfigError(
                        f"{plan.name}: rank {r} op {i} reads rank {src.rank}'s scratch "
                        f"{src.local()} that rank {src.rank} never wrote (as exactly that range)"
                    )
                if waited[src.rank] < sigs[r]:
                    raise ConfigError(
                        f"{plan.name}: rank {r} op {i} reads rank {src.rank}'s scratch before "
                        f"waiting for its signal #{sigs[r]}"
                    )


def _check_two_way(plan: Plan, n: int) -> None:
    """A rank that writes into a peer must hear from that peer in the same call, directly or
    through other ranks (ring): then it cannot start the call after next, which reuses the
    same half of the peer's double-buffered scratch, before the peer has finished this one."""
    hears: dict[int, set[int]] = {r: set() for r in range(n)}  # receiver -> senders
    writes: set[tuple[int, int]] = set()
    for r, ops in enumerate(plan.ranks):
        for op in ops:
            if op.kind == "put":
                writes.add((r, _peer(op)))
                if op.dst is not None and op.dst.buffer == "packets":
                    hears[_peer(op)].add(r)
            elif op.kind == "signal":
                hears[_peer(op)].add(r)
    for writer, target in sorted(writes):
        reached, todo = set(), [writer]
        while todo:
            for sender in hears[todo.pop()]:
                if sender not in reached:
                    reached.add(sender)
                    todo.append(sender)
        if target not in reached:
            raise ConfigError(
                f"{plan.name}: rank {writer} writes to rank {target} but never hears from it "
                "in the same call; add a signal back (double-buffered regions need it)"
            )
