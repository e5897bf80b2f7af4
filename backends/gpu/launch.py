"""Start one process per GPU, each with a :class:`GpuCommunicator`, and run a function.

For tests, tools and benchmarks on one host: ``spawn_ranks(2, fn, args)`` runs
``fn(comm, *args)`` on ranks 0 and 1 (GPU ``rank``) and returns the results by rank.
``fn`` must be importable (a module-level function). NVLink multicast stays off.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable
from typing import Any

from sdr.backends.shm.bootstrap import TcpBootstrap, free_port
from sdr.errors import TimeoutError, TransportError

log = logging.getLogger(__name__)


def _entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple, q: Any) -> None:
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    comm = None
    try:
        from sdr.backends.gpu.communicator import GpuCommunicator  # noqa: PLC0415

        comm = GpuCommunicator(TcpBootstrap(rank, world, port), device=rank)
        q.put((rank, "ok", fn(comm, *args)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        q.put((rank, "err", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        if comm is not None:
            try:
                comm.close()
            except Exception:  # noqa: BLE001 - the result is already reported
                log.exception("rank %d: close failed", rank)


def spawn_ranks(
    world: int, fn: Callable[..., Any], args: tuple = (), timeout: float = 600
) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``world`` GPU ranks; results in rank order."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, q)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors = []
    try:
        for _ in range(world):
            rank, status, value = q.get(timeout=timeout)
            if status == "err":
                errors.append(f"rank {rank}: {value}")
            results[rank] = value
    except queue.Empty as exc:
        raise TimeoutError(f"GPU ranks gave no result within {timeout} s") from exc
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    if errors:
        raise TransportError("GPU ranks failed:\n" + "\n".join(errors))
    return [results[r] for r in range(world)]
