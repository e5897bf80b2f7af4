"""A TCP bootstrap: rank 0 listens, the others connect; all-gather and barrier through it.

Used by both collective backends (shared memory and GPU) to exchange registration
handles while setting up. Messages are length-prefixed pickles between processes of one
job on one host (bind to loopback unless told otherwise); never expose it to a network.
"""

from __future__ import annotations

import logging
import pickle
import socket
import struct
import time
from typing import Any

from sdr.backends.oob import read_exact
from sdr.errors import ConfigError, TimeoutError

log = logging.getLogger(__name__)

_LEN = struct.Struct("!Q")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for launching a group)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    (n,) = _LEN.unpack(read_exact(sock, _LEN.size))
    return pickle.loads(read_exact(sock, n))  # noqa: S301 - peers are ranks of our own job


class TcpBootstrap:
    """Star-shaped bootstrap over TCP (see module docs). ``timeout`` is in seconds."""

    def __init__(
        self, rank: int, world_size: int, port: int, host: str = "127.0.0.1", timeout: float = 60
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} of world_size {world_size}: expected 0 <= rank < size")
        self.rank = rank
        self.world_size = world_size
        self._peers: list[socket.socket] = []
        self._sock: socket.socket | None = None
        if world_size == 1:
            return
        if rank == 0:
            self._accept(host, port, timeout)
        else:
            self._connect(host, port, timeout)
        log.debug("bootstrap rank %d/%d up on %s:%d", rank, world_size, host, port)

    def _accept(self, host: str, port: int, timeout: float) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((host, port))
        server.listen(self.world_size)
        server.settimeout(timeout)
        by_rank: dict[int, socket.socket] = {}
        try:
            while len(by_rank) < self.world_size - 1:
                conn, _ = server.accept()
                conn.settimeout(None)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                by_rank[int(_recv(conn))] = conn
        except OSError as exc:
            raise TimeoutError(f"bootstrap: {len(by_rank) + 1}/{self.world_size} joined") from exc
        finally:
            server.close()
        self._peers = [by_rank[r] for r in sorted(by_rank)]

    def _connect(self, host: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=timeout)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"bootstrap: rank 0 at {host}:{port} not up") from exc
                time.sleep(0.01)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _send(sock, self.rank)
        self._sock = sock

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order."""
        if self.world_size == 1:
            return [obj]
        if self.rank == 0:
            objs = [obj] + [_recv(p) for p in self._peers]
            for p in self._peers:
                _send(p, objs)
            return objs
        assert self._sock is not None
        _send(self._sock, obj)
        return list(_recv(self._sock))

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """``root``'s ``obj`` on every rank."""
        return self.all_gather(obj if self.rank == root else None)[root]

    def barrier(self) -> None:
        """Return once every rank has called barrier."""
        self.all_gather(None)

    def close(self) -> None:
        """Close the sockets."""
        for s in self._peers:
            s.close()
        if self._sock is not None:
            self._sock.close()
        self._peers, self._sock = [], None
