"""A pool of offload worker processes, shared by the transports that use it.

Starting a process costs tens of milliseconds (an interpreter and NumPy), so one pool
serves any number of QPs and transports; the one that creates a pool owns it and stops it
on close. Workers are fresh interpreters (``python -m sdr.backends.offload.worker``) that
inherit nothing but their end of a command socket pair, so the application's main module
is never re-imported (no ``if __name__ == "__main__"`` guard needed) and no sockets, locks
or mappings leak into them. A worker leaves when its command socket closes, i.e. also
when the application dies.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import sdr.backends
from sdr.errors import ConfigError, TransportError

__all__ = ["WorkerPool", "MAX_WORKERS"]

log = logging.getLogger(__name__)

MAX_WORKERS = 256
_REPLY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 5.0


def _stop_all(procs: list[subprocess.Popen[bytes]], conns: list[Connection]) -> None:
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("stop",))
    for proc in procs:
        try:
            proc.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("offload worker %s did not stop; terminating it", proc.pid)
            proc.terminate()
            try:
                proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    for conn in conns:
        conn.close()


def _start_worker(index: int) -> tuple[subprocess.Popen[bytes], Connection]:
    ours, theirs = socket.socketpair()
    env = dict(os.environ)
    root = str(Path(sdr.backends.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sdr.backends.offload.worker", str(theirs.fileno()), str(index)],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        ours.close()
        raise TransportError(f"cannot start offload worker {index}: {exc}") from exc
    finally:
        theirs.close()
    return proc, Connection(ours.detach())


class WorkerPool:
    """``workers`` processes, each serving the channels assigned to it."""

    def __init__(self, workers: int = 1) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int):
            raise ConfigError(f"workers must be an integer, got {workers!r}")
        if not 1 <= workers <= MAX_WORKERS:
            raise ConfigError(f"workers must be in [1, {MAX_WORKERS}], got {workers}")
        self._procs: list[subprocess.Popen[bytes]] = []
        self._conns: list[Connection] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._next_worker = 0
        try:
            for index in range(workers):
                proc, conn = _start_worker(index)
                self._procs.append(proc)
                self._conns.append(conn)
        except BaseException:
            _stop_all(self._procs, self._conns)
            raise
        self._finalizer = weakref.finalize(self, _stop_all, self._procs, self._conns)

    @property
    def size(self) -> int:
        return len(self._procs)

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (for leak checks)."""
        return [p.pid for p in self._procs]

    @property
    def alive(self) -> bool:
        return self._finalizer.alive and all(p.poll() is None for p in self._procs)

    def new_id(self) -> int:
        """A pool-wide id for a QP or a memory segment."""
        return next(self._ids)

    def assign(self, channels: int) -> list[int]:
        """Worker index per channel: round-robin, continuing where the last QP stopped."""
        with self._lock:
            start = self._next_worker
            self._next_worker = (start + channels) % self.size
        return [(start + ch) % self.size for ch in range(channels)]

    def call(self, workers: Iterable[int], msg: tuple[Any, ...]) -> dict[int, Any]:
        """Send ``msg`` to these workers and collect their replies (TransportError on error)."""
        if not self._finalizer.alive:
            raise TransportError("the offload worker pool is stopped")
        targets = sorted(set(workers))
        replies: dict[int, Any] = {}
        with self._lock:
            for index in targets:
                try:
                    self._conns[index].send(msg)
                except (OSError, ValueError) as exc:
                    raise TransportError(f"offload worker {index} is gone: {exc}") from exc
            for index in targets:
                conn = self._conns[index]
                if not conn.poll(_REPLY_TIMEOUT_S):
                    raise TransportError(f"offload worker {index} did not answer {msg[0]!r}")
                try:
                    status, value = conn.recv()
                except (EOFError, OSError) as exc:
                    raise TransportError(f"offload worker {index} died: {exc}") from exc
                if status != "ok":
                    raise TransportError(f"offload worker {index} failed {msg[0]!r}: {value}")
                replies[index] = value
        return replies

    def broadcast(self, msg: tuple[Any, ...]) -> dict[int, Any]:
        """:meth:`call` on every worker."""
        return self.call(range(self.size), msg)

    def stop(self) -> None:
        """Stop every worker and wait for it (idempotent)."""
        with self._lock:
            self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
