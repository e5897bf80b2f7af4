"""The algorithm library: plan generators by name, and a cached way to build a plan."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from sdr.collectives.algorithms.allreduce import (
    allreduce_oneshot,
    allreduce_oneshot_get,
    allreduce_oneshot_ll,
    allreduce_ring,
    allreduce_twoshot,
    allreduce_twoshot_ll,
)
from sdr.collectives.algorithms.gather import (
    allgather_ll,
    allgather_mesh,
    broadcast_ll,
    broadcast_mesh,
    broadcast_pipelined,
    reduce_scatter_ll,
    reduce_scatter_mesh,
)
from sdr.collectives.plan import Plan
from sdr.errors import ConfigError

#: name -> (collective, generator(world_size) or generator(world_size, root))
ALGORITHMS: dict[str, tuple[str, Callable[..., Plan]]] = {
    "allreduce_oneshot_ll": ("allreduce", allreduce_oneshot_ll),
    "allreduce_oneshot": ("allreduce", allreduce_oneshot),
    "allreduce_oneshot_get": ("allreduce", allreduce_oneshot_get),
    "allreduce_twoshot_ll": ("allreduce", allreduce_twoshot_ll),
    "allreduce_twoshot": ("allreduce", allreduce_twoshot),
    "allreduce_ring": ("allreduce", allreduce_ring),
    "allgather_ll": ("allgather", allgather_ll),
    "allgather_mesh": ("allgather", allgather_mesh),
    "reduce_scatter_ll": ("reduce_scatter", reduce_scatter_ll),
    "reduce_scatter_mesh": ("reduce_scatter", reduce_scatter_mesh),
    "broadcast_ll": ("broadcast", broadcast_ll),
    "broadcast_mesh": ("broadcast", broadcast_mesh),
    "broadcast_pipelined": ("broadcast", broadcast_pipelined),
}


@lru_cache(maxsize=256)
def build_plan(name: str, world_size: int, root: int = 0) -> Plan:
    """The plan of algorithm ``name`` for ``world_size`` ranks (``root`` for broadcast)."""
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {name!r}; expected one of {sorted(ALGORITHMS)}")
    collective, gen = ALGORITHMS[name]
    if collective == "broadcast":
        if not 0 <= root < world_size:
            raise ConfigError(f"broadcast root {root} outside ranks 0..{world_size - 1}")
        return gen(world_size, root)
    return gen(world_size)


def algorithms_for(collective: str) -> list[str]:
    """Names of the algorithms that implement ``collective``."""
    return [name for name, (coll, _) in ALGORITHMS.items() if coll == collective]


__all__ = ["ALGORITHMS", "algorithms_for", "build_plan"]
