"""The execution plan: what a compiled collective program is, and its JSON form.

A plan lists, for every rank, an ordered list of operations on *chunks* of four buffers:

- ``input`` and ``output``: the caller's buffers (local only);
- ``scratch``: a registered buffer that peers may write (``put``) and read (``get``);
- ``packets``: a registered buffer of LL packets (8 data bytes and two 32-bit flags in
  one 16-byte store), written by peers and read locally; reading a packet waits until
  its flag says it belongs to the current call, so no separate signal is needed.

Buffers are measured in chunks, not bytes: at run time the executor derives one chunk
size (the *unit*) from the input size, so one plan serves every message size. The JSON
schema is versioned (``PLAN_SCHEMA``/``PLAN_VERSION``); docs/collectives.md documents it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sdr.errors import ConfigError

PLAN_SCHEMA = "sdr.collective-plan"
PLAN_VERSION = 1

BUFFERS = ("input", "output", "scratch", "packets")
#: Buffers a peer may address through a memory channel (they are registered and exchanged).
REMOTE_BUFFERS = ("scratch", "packets")
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast")
#: Operation kinds. put: local -> peer, get: peer -> local, copy: local -> local,
#: reduce: dst = sum(srcs) (local, or a peer's scratch named by rank),
#: signal/wait: semaphore, flush: prior puts visible,
#: barrier: all workers of this rank (GPU thread blocks) meet.
OP_KINDS = ("put", "get", "copy", "reduce", "signal", "wait", "flush", "barrier")
#: Channel kinds. "memory": peer memory mapped into this rank (shared memory, CUDA IPC).
#: "port": a proxy moves the data (the SDR transport between datacenters); reserved.
CHANNEL_KINDS = ("memory", "port")


@dataclass(frozen=True)
class ChunkRef:
    """``count`` consecutive chunks of ``buffer`` starting at chunk ``index``.

    ``rank`` names another rank whose *scratch* is meant (a remote source of ``reduce``,
    read through the memory channel); None means this rank's own buffer (or, for put/get,
    the op's ``peer``).
    """

    buffer: str
    index: int
    count: int = 1
    rank: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this reference."""
        out: dict[str, Any] = {"buffer": self.buffer, "index": self.index, "count": self.count}
        if self.rank is not None:
            out["rank"] = self.rank
        return out

    def local(self) -> ChunkRef:
        """The same chunks as seen by their owner (``rank`` dropped)."""
        return ChunkRef(self.buffer, self.index, self.count)

    @staticmethod
    def from_json(obj: dict[str, Any]) -> ChunkRef:
        """Parse a reference; raises ConfigError on a malformed object."""
        try:
            rank = None if obj.get("rank") is None else int(obj["rank"])
            return ChunkRef(str(obj["buffer"]), int(obj["index"]), int(obj.get("count", 1)), rank)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"bad chunk reference {obj!r}: {exc}") from exc


@dataclass(frozen=True)
class Op:
    """One operation of one rank. ``peer`` names the other rank of put/get/signal/wait/flush."""

    kind: str
    dst: ChunkRef | None = None
    srcs: tuple[ChunkRef, ...] = ()
    peer: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this operation (absent fields are left out)."""
        out: dict[str, Any] = {"op": self.kind}
        if self.peer is not None:
            out["peer"] = self.peer
        if self.kind == "reduce":
            out["srcs"] = [s.to_json() for s in self.srcs]
        elif self.srcs:
            out["src"] = self.srcs[0].to_json()
        if self.dst is not None:
            out["dst"] = self.dst.to_json()
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Op:
        """Parse an operation; raises ConfigError on a malformed object."""
        kind = obj.get("op")
        if kind not in OP_KINDS:
            raise ConfigError(f"unknown plan op {kind!r}; expected one of {OP_KINDS}")
        srcs: tuple[ChunkRef, ...] = ()
        if "srcs" in obj:
            srcs = tuple(ChunkRef.from_json(s) for s in obj["srcs"])
        elif "src" in obj:
            srcs = (ChunkRef.from_json(obj["src"]),)
        dst = ChunkRef.from_json(obj["dst"]) if "dst" in obj else None
        peer = int(obj["peer"]) if "peer" in obj else None
        return Op(kind, dst, srcs, peer)


@dataclass(frozen=True)
class Channel:
    """A directed connection from ``rank`` to ``peer`` of kind ``memory`` (or ``port``)."""

    rank: int
    peer: int
    kind: str = "memory"


@dataclass(eq=False)
class Plan:
    """A compiled collective: per-rank op lists over chunked buffers. See module docs.

    Plans compare and hash by identity (executors cache lowered ops per plan object).
    """

    name: str
    collective: str
    world_size: int
    chunks: dict[str, int]
    ranks: list[list[Op]]
    channels: list[Channel] = field(default_factory=list)
    in_place: bool = True
    root: int | None = None
    version: int = PLAN_VERSION

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (schema ``sdr.collective-plan``, version 1)."""
        return {
            "schema": PLAN_SCHEMA,
            "version": self.version,
            "name": self.name,
            "collective": self.collective,
            "world_size": self.world_size,
            "root": self.root,
            "in_place": self.in_place,
            "chunks": {b: self.chunks.get(b, 0) for b in BUFFERS},
            "channels": [{"rank": c.rank, "peer": c.peer, "kind": c.kind} for c in self.channels],
            "ranks": [
                {"rank": r, "ops": [op.to_json() for op in ops]} for r, ops in enumerate(self.ranks)
            ],
        }

    def dumps(self, indent: int | None = None) -> str:
        """The plan as a JSON string."""
        return json.dumps(self.to_json(), indent=indent)

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Plan:
        """Parse and check a plan dict; raises ConfigError naming the first problem."""
        if obj.get("schema") != PLAN_SCHEMA:
            raise ConfigError(f"plan schema {obj.get('schema')!r}; expected {PLAN_SCHEMA!r}")
        if obj.get("version") != PLAN_VERSION:
            raise ConfigError(f"plan version {obj.get('version')!r}; expected {PLAN_VERSION}")
        try:
            ranks_json = sorted(obj["ranks"], key=lambda r: int(r["rank"]))
            plan = Plan(
                name=str(obj["name"]),
                collective=str(obj["collective"]),
                world_size=int(obj["world_size"]),
                chunks={b: int(obj["chunks"].get(b, 0)) for b in BUFFERS},
                ranks=[[Op.from_json(o) for o in r["ops"]] for r in ranks_json],
                channels=[
                    Channel(int(c["rank"]), int(c["peer"]), str(c.get("kind", "memory")))
                    for c in obj.get("channels", [])
                ],
                in_place=bool(obj.get("in_place", True)),
                root=None if obj.get("root") is None else int(obj["root"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"malformed plan: {exc!r}") from exc
        validate_plan(plan)
        return plan

    @staticmethod
    def loads(text: str) -> Plan:
        """Parse a plan from a JSON string; ConfigError when it is not valid JSON."""
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            raise ConfigError(f"plan is not valid JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise ConfigError(f"plan must be a JSON object, got {type(obj).__name__}")
        return Plan.from_json(obj)


def validate_plan(plan: Plan) -> None:
    """Check the shape of a plan (names, ranges, peers); raises ConfigError.

    The happens-before checks (a read follows the signal that covers the write) are done
    by the compiler in :mod:`sdr.collectives.dsl`, which sees the program as a whole.
    """
    if plan.collective not in COLLECTIVES:
        raise ConfigError(f"collective {plan.collective!r}; expected one of {COLLECTIVES}")
    n = plan.world_size
    if n < 1 or len(plan.ranks) != n:
        raise ConfigError(f"plan has {len(plan.ranks)} rank op lists for world_size {n}")
    if plan.chunks.get("input", 0) < 1 or plan.chunks.get("output", 0) < 1:
        raise ConfigError(f"plan needs >= 1 input and output chunk, got {plan.chunks}")
    for ch in plan.channels:
        if ch.kind not in CHANNEL_KINDS:
            raise ConfigError(f"channel kind {ch.kind!r}; expected one of {CHANNEL_KINDS}")
    for r, ops in enumerate(plan.ranks):
        for i, op in enumerate(ops):
            where = f"rank {r} op {i} ({op.kind})"
            needs_peer = op.kind in ("put", "get", "signal", "wait", "flush")
            if needs_peer and (op.peer is None or not 0 <= op.peer < n or op.peer == r):
                raise ConfigError(f"{where}: peer {op.peer!r} is not another rank of {n}")
            refs = ([op.dst] if op.dst is not None else []) + list(op.srcs)
            for ref in refs:
                if ref.buffer not in BUFFERS:
                    raise ConfigError(f"{where}: buffer {ref.buffer!r}; expected {BUFFERS}")
                total = plan.chunks.get(ref.buffer, 0)
                if ref.count < 1 or ref.index < 0 or ref.index + ref.count > total:
                    raise ConfigError(
                        f"{where}: chunks [{ref.index}, {ref.index + ref.count}) of "
                        f"{ref.buffer!r} outside its {total} chunks"
                    )
            if op.kind in ("put", "get", "copy", "reduce"):
                if op.dst is None or not op.srcs:
                    raise ConfigError(f"{where}: needs dst and src")
                if op.kind == "put" and op.dst.buffer not in REMOTE_BUFFERS:
                    raise ConfigError(f"{where}: put writes a peer's {op.dst.buffer!r}")
                if op.kind == "get" and op.srcs[0].buffer != "scratch":
                    raise ConfigError(f"{where}: get reads a peer's {op.srcs[0].buffer!r}")
                if op.kind in ("copy", "reduce", "get") and op.dst.buffer == "packets":
                    raise ConfigError(f"{where}: only put writes packets (to a peer)")
            for ref in refs:
                if ref.rank is None:
                    continue
                if op.kind != "reduce" or ref is op.dst or ref.buffer != "scratch":
                    raise ConfigError(f"{where}: only reduce may read a peer's scratch by rank")
                if not 0 <= ref.rank < n or ref.rank == r:
                    raise ConfigError(f"{where}: rank {ref.rank} is not another rank of {n}")
            if op.kind in ("put", "get", "copy") and len(op.srcs) != 1:
                raise ConfigError(f"{where}: takes exactly one source")
