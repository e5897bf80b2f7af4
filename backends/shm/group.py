"""A pool of worker processes that run collectives together, one process per rank.

Starting processes is the slow part of a multi-process test or tool, so a
:class:`LocalGroup` starts ``max_ranks`` workers once and forms communicators of any world
size up to that among its first workers on demand (cached per size)::

    with LocalGroup(4) as group:
        outs = group.run(3, allreduce_call, [(x0,), (x1,), (x2,)])
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from sdr.backends.shm.bootstrap import TcpBootstrap, free_port
from sdr.backends.shm.communicator import ShmCommunicator
from sdr.errors import ConfigError, TransportError

if TYPE_CHECKING:  # named only in a cast (the fork contexts exist only on POSIX)
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

log = logging.getLogger(__name__)

#: multiprocessing's start methods (POSIX); each context of them has ``Process``.
StartMethod = Literal["fork", "spawn", "forkserver"]


def _worker(rank: int, conn: Any) -> None:
    comms: dict[int, ShmCommunicator] = {}
    while True:
        msg = conn.recv()
        if msg is None:
            break
        world, port, fn, args = msg
        try:
            if world not in comms:
                comms[world] = ShmCommunicator(TcpBootstrap(rank, world, port))
            conn.send(("ok", fn(comms[world], *args)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent with its traceback
            conn.send(("err", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    for c in comms.values():
        c.close()
    conn.close()


class LocalGroup:
    """``max_ranks`` worker processes; :meth:`run` executes a function on the first few."""

    def __init__(self, max_ranks: int, start_method: StartMethod = "fork") -> None:
        if max_ranks < 1:
            raise ConfigError(f"max_ranks {max_ranks}; expected >= 1")
        # a StartMethod's context is one of these (typeshed types get_context of a union of
        # the names as BaseContext, which has no Process)
        ctx = cast("ForkContext | SpawnContext | ForkServerContext", mp.get_context(start_method))
        self._conns = []
        self._procs = []
        self._ports: dict[int, int] = {}
        for r in range(max_ranks):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(r, child), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)

    @property
    def max_ranks(self) -> int:
        """How many workers the group holds."""
        return len(self._procs)

    def run(
        self,
        world: int,
        fn: Callable[..., Any],
        args: Sequence[tuple[Any, ...]] | None = None,
    ) -> list[Any]:
        """Run ``fn(communicator, *args[rank])`` on ranks ``0..world-1``; results by rank.

        ``fn`` and the arguments must be picklable (module-level functions) unless the group
        was started with ``fork``. Raises TransportError with the worker's traceback.
        """
        if not 1 <= world <= self.max_ranks:
            raise ConfigError(f"world {world}; this group has 1..{self.max_ranks} ranks")
        args = list(args) if args is not None else [()] * world
        if len(args) != world:
            raise ConfigError(f"{len(args)} argument tuples for {world} ranks")
        port = self._ports.setdefault(world, free_port())
        for r in range(world):
            self._conns[r].send((world, port, fn, args[r]))
        results, errors = [], []
        for r in range(world):
            status, value = self._conns[r].recv()
            if status == "err":
                errors.append(f"rank {r}: {value}")
            results.append(value)
        if errors:
            raise TransportError("collective failed on workers:\n" + "\n".join(errors))
        return results

    def close(self) -> None:
        """Stop the workers (their communicators release shared memory)."""
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.send(None)
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        self._conns, self._procs = [], []

    def __enter__(self) -> LocalGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
