"""The algorithm library: plan generators by name, and a cached way to build a plan.

The library's memory-channel plans register here, in code, with
:func:`~sdr.collectives.algorithm_registry.register_algorithm`; users add theirs the same
way or through the ``sdr.collective_algorithms`` entry-point group (see
:mod:`sdr.collectives.algorithm_registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from sdr.collectives.algorithm_registry import (
    AlgorithmView,
    CollectiveAlgorithm,
    available_algorithms,
    get_algorithm,
    register_algorithm,
)
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

_LIBRARY: dict[str, tuple[str, Callable[..., Plan]]] = {
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
for _name, (_collective, _build) in _LIBRARY.items():
    register_algorithm(_name, _build, collective=_collective)

ALGORITHMS: AlgorithmView[tuple[str, Callable[..., Plan]]] = AlgorithmView(
    "memory", lambda a: (a.collective, a.build)
)
"""Read-only view, name -> (collective, generator(world_size) or generator(world_size,
root)), of every memory-channel algorithm (registered in code or by entry point)."""


@lru_cache(maxsize=256)
def _plan(algorithm: CollectiveAlgorithm, world_size: int, root: int) -> Plan:
    if algorithm.collective == "broadcast":
        return algorithm.build(world_size, root)
    return algorithm.build(world_size)


def build_plan(name: str, world_size: int, root: int = 0) -> Plan:
    """The plan of algorithm ``name`` for ``world_size`` ranks (``root`` for broadcast).

    Plans are cached per (registered algorithm, world size, root): treat them as read-only.
    """
    algorithm = get_algorithm(name)
    if algorithm.collective == "broadcast":
        if not 0 <= root < world_size:
            raise ConfigError(f"broadcast root {root} outside ranks 0..{world_size - 1}")
    else:
        root = 0
    return _plan(algorithm, world_size, root)


def algorithms_for(collective: str) -> list[str]:
    """Names of the memory-channel algorithms that implement ``collective``, sorted."""
    return available_algorithms("memory", collective)


__all__ = [
    "ALGORITHMS",
    "CollectiveAlgorithm",
    "algorithms_for",
    "available_algorithms",
    "build_plan",
    "get_algorithm",
    "register_algorithm",
]
