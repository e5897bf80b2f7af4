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

#: Measured on 2 H200 (NVLink, CUDA graphs, bfloat16), docs/collectives.md "Benchmarks":
#: allreduce one-shot LL wins up to 512 KiB, two-shot LL at 1 MiB, one-shot through scratch
#: up to 16 MiB, two-shot through scratch above; NCCL ties or beats us from 256 MiB.
ONESHOT_LL_MAX = 512 * KiB
TWOSHOT_LL_MAX = 1 * MiB
ONESHOT_MAX = 16 * MiB
#: From here NCCL takes the call at a world size between the ones we benchmarked (3 GPUs;
#: 4 and more use the 4-GPU thresholds below).
NCCL_UNMEASURED_FROM = 64 * MiB
#: With 2 GPUs (three runs, docs/collectives.md): our broadcast is 1.3-2.4x NCCL up to
#: 2 MiB, 1.06-1.07x at 4 MiB and 0.93-0.94x at 8 MiB; the pipelined broadcast reaches
#: 0.92x at 1 GiB. Our reduce-scatter is 1.01-3.3x NCCL at every size.
NCCL_BROADCAST_2GPU_FROM = 8 * MiB
#: Without NCCL: the pipelined broadcast (8 slices) beats broadcast_mesh from 32 MiB
#: (0.94x its time at 32 MiB, 0.90x at 1 GiB; 2 H200, in place) and loses below (slice
#: signalling costs ~20 us at 1-8 MiB).
BROADCAST_PIPELINED_FROM = 32 * MiB
#: With 2 GPUs our allreduce read 0.96-1.11x NCCL at 256 MiB, 0.92-1.04x at 512 MiB and
#: 0.89-0.99x at 1 GiB over three runs: NCCL from 256 MiB.
NCCL_ALLREDUCE_2GPU_FROM = 256 * MiB
#: With 4 GPUs (one run, docs/collectives.md "4 GPUs"): our allreduce is 1.4-2.3x NCCL up
#: to 1 MiB, 1.01x at 2 MiB and 0.56-0.79x from 4 MiB; allgather 1.3-1.8x up to 4 MiB,
#: 0.97x at 8 MiB and below from there. Larger worlds (unmeasured) take NCCL from the same
#: sizes: the gap grows with the world size.
NCCL_ALLREDUCE_4GPU_FROM = 4 * MiB
NCCL_ALLGATHER_4GPU_FROM = 8 * MiB
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
    if collective not in ("allreduce", "allgather", "reduce_scatter", "broadcast"):
        raise ConfigError(
            f"collective {collective!r}; expected allreduce, allgather, reduce_scatter or broadcast"
        )
    n = world_size
    if nccl_available and n > 1 and _nccl_is_faster(collective, nbytes, n):
        return NCCL
    peers = max(1, n - 1)
    if collective == "allreduce":
        if n > MESH_MAX_RANKS:
            return "allreduce_ring"
        if nbytes <= ONESHOT_LL_MAX // peers:
            return "allreduce_oneshot_ll"
        if nbytes <= TWOSHOT_LL_MAX:
            return "allreduce_twoshot_ll"
        if n <= 2 and nbytes <= ONESHOT_MAX:
            return "allreduce_oneshot"  # with 2 ranks as few bytes as two-shot, one sync
        return "allreduce_twoshot"
    small = nbytes <= TWOSHOT_LL_MAX
    if collective == "allgather":
        return "allgather_ll" if small else "allgather_mesh"
    if collective == "reduce_scatter":
        return "reduce_scatter_ll" if small else "reduce_scatter_mesh"
    if nbytes >= BROADCAST_PIPELINED_FROM:
        return "broadcast_pipelined"
    return "broadcast_ll" if small else "broadcast_mesh"


def _nccl_is_faster(collective: str, nbytes: int, world_size: int) -> bool:
    """Where NCCL measured faster than us, or where we have no measurement of our own."""
    if collective == "allreduce" and world_size == 2:
        return nbytes >= NCCL_ALLREDUCE_2GPU_FROM
    if world_size == 2 and collective in ("allgather", "reduce_scatter"):
        return False  # ours 1.03-2.9x / 1.01-3.3x NCCL up to 512 MiB, 0.98-1.06x at 1 GiB
    if collective == "broadcast" and world_size == 2:
        return nbytes >= NCCL_BROADCAST_2GPU_FROM
    if world_size >= 4:
        if collective == "allgather":
            return nbytes >= NCCL_ALLGATHER_4GPU_FROM
        return nbytes >= NCCL_ALLREDUCE_4GPU_FROM
    return nbytes >= NCCL_UNMEASURED_FROM
