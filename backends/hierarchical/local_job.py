"""Run a function in forked processes, one per rank, optionally inside network namespaces.

For tests, benchmarks and examples that emulate several datacenters on one host::

    results = run_ranks(4, fn, namespaces=["dcA", "dcA", "dcB", "dcB"])

``fn(rank)`` runs in a fresh child (forked, so it may be a closure); a child that enters a
namespace does so before calling ``fn``. Results come back by rank; any rank's exception
is raised here as a TransportError carrying every failed rank's traceback.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from sdr.errors import TimeoutError, TransportError

if TYPE_CHECKING:  # named only in a cast (the fork contexts exist only on POSIX)
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

__all__ = ["run_ranks"]

#: multiprocessing's start methods (POSIX); each context of them has ``Process``.
StartMethod = Literal["fork", "spawn", "forkserver"]


def _child(fn: Callable[[int], Any], rank: int, namespace: str | None, queue: Any) -> None:
    try:
        if namespace:
            from sdr.backends.wan import enter_namespace

            enter_namespace(namespace)
        queue.put((rank, "ok", fn(rank)))
    except BaseException:  # noqa: BLE001 - reported to the parent
        queue.put((rank, "err", traceback.format_exc()))


def run_ranks(
    world: int,
    fn: Callable[[int], Any],
    *,
    namespaces: Sequence[str | None] | None = None,
    timeout: float = 300.0,
    start_method: StartMethod = "fork",
) -> list[Any]:
    """``[fn(0), ..., fn(world - 1)]``, each computed in its own process.

    ``start_method="spawn"`` for processes that use CUDA after the parent touched it
    (``fn`` must then be picklable: a module-level function or a partial of one).
    """
    # a StartMethod's context is one of these (typeshed types get_context of a union of the
    # names as BaseContext, which has no Process)
    ctx = cast("ForkContext | SpawnContext | ForkServerContext", mp.get_context(start_method))
    queue = ctx.Queue()
    spaces = list(namespaces) if namespaces is not None else [None] * world
    procs = [ctx.Process(target=_child, args=(fn, r, spaces[r], queue)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, tuple[str, Any]] = {}
    try:
        deadline = time.monotonic() + timeout
        while len(results) < world:
            left = deadline - time.monotonic()
            try:
                rank, status, value = queue.get(timeout=max(left, 0.01))
            except Exception as exc:  # queue.Empty
                missing = sorted(set(range(world)) - set(results))
                raise TimeoutError(f"ranks {missing} did not finish within {timeout} s") from exc
            results[rank] = (status, value)
            if status == "err":
                break  # the others may wait on it forever: stop early
    finally:
        for p in procs:
            p.join(timeout=5 if len(results) < world else 30)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [f"rank {r}:\n{v}" for r, (s, v) in sorted(results.items()) if s == "err"]
    if errors:
        raise TransportError("ranks failed:\n" + "\n".join(errors))
    return [results[r][1] for r in range(world)]
