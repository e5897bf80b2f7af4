"""Which algorithm runs a collective call: one readable function keyed on size and ranks.

The thresholds come from the benchmark on 2 H200 GPUs over NVLink (docs/collectives.md,
"Benchmarks"); ``"nccl"`` means our plans measured slower than NCCL there, so a GPU
communicator hands the call to NCCL. Without NCCL (the shared-memory backend, or a GPU
machine without it) the best plan of ours is used instead.
"""

from __future__ import annotations

from sdr.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB

NCCL = "nccl"

#: Up to this many bytes, LL packets (data and flag in one store) beat put + signal.
ONESHOT_LL_MAX = 256 * KiB
TWOSHOT_LL_MAX = 2 * MiB
#: Above this, NCCL's bus bandwidth matched or beat ours on 2 H200 (see module docs).
NCCL_FROM = 64 * MiB
#: Above this many ranks, full-mesh algorithms open too many channels: use the ring.
MESH_MAX_RANKS = 8


def select_algorithm(
    collective: str, nbytes: int, world_size: int, *, nccl_available: bool = False
) -> str:
    """The algorithm (or ``"nccl"``) for one call.

    ``nbytes`` is the size of the full message: the allreduce/broadcast buffer, the
    allgather *output* or the reduce-scatter *input*.
    """
    if nbytes < 0 or world_size < 1:
        raise ConfigError(f"nbytes {nbytes} / world_size {world_size}: expected >= 0 / >= 1")
    large = nbytes >= NCCL_FROM
    if nccl_available and large and world_size > 1:
        return NCCL
    if collective == "allreduce":
        if world_size > MESH_MAX_RANKS:
            return "allreduce_ring"
        if nbytes <= ONESHOT_LL_MAX // max(1, world_size - 1):
            return "allreduce_oneshot_ll"
        if nbytes <= TWOSHOT_LL_MAX:
            return "allreduce_twoshot_ll"
        return "allreduce_twoshot"
    if collective == "allgather":
        return "allgather_ll" if nbytes <= TWOSHOT_LL_MAX else "allgather_mesh"
    if collective == "reduce_scatter":
        return "reduce_scatter_ll" if nbytes <= TWOSHOT_LL_MAX else "reduce_scatter_mesh"
    if collective == "broadcast":
        return "broadcast_ll" if nbytes <= TWOSHOT_LL_MAX else "broadcast_mesh"
    raise ConfigError(
        f"collective {collective!r}; expected allreduce, allgather, reduce_scatter or broadcast"
    )
