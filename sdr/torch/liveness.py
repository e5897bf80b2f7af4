"""Peer liveness for the ``sdr`` process group: a control connection per peer, with heartbeats.

Every rank holds one TCP connection to every other rank of the group and a thread of its
own that sends a heartbeat on each every ``interval`` seconds and reads theirs. A peer is
**gone** when its connection closes or resets (the kernel closes a killed process's
sockets at once) or when nothing arrived from it for ``silence`` seconds (a partition, or
a host that died without closing). A peer that is merely busy (a checkpoint, an eval, a
long compute) keeps answering: the heartbeats come from this thread, not from the
training loop, and never depend on how long a collective waits.

The first peer found gone is recorded once, as a one-line error naming it; ``on_failure``
callbacks run then (the process group fails its pending operations with it), and
:meth:`Liveness.check` raises it from then on.
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

from sdr.errors import TransportError

__all__ = ["Liveness", "PeerGone"]

log = logging.getLogger(__name__)

_BEAT = b"h"
_BYE = b"b"  # leaving after draining its links: the peers' drains may finish
_ABANDON = b"x"  # leaving after a failure, without draining


class PeerGone(TransportError):
    """A peer of the process group left or died (the message names it).

    ``left``: it said goodbye (closed its group on purpose) rather than vanished.
    """

    left = False


class Liveness:
    """Heartbeats with every peer of ``bootstrap`` (set up collectively; see module docs).

    ``host``: the address this rank listens on for its peers. ``names(rank)`` describes a
    peer in messages (e.g. ``"rank 1 (datacenter 1)"``).
    """

    def __init__(
        self,
        bootstrap: object,
        host: str,
        *,
        interval: float = 0.5,
        silence: float = 5.0,
        names: Callable[[int], str] = lambda r: f"rank {r}",
        connect_timeout: float = 60.0,
    ) -> None:
        self.rank: int = bootstrap.rank  # type: ignore[attr-defined]
        self.world_size: int = bootstrap.world_size  # type: ignore[attr-defined]
        self.interval = interval
        self.silence = silence
        self._names = names
        self._callbacks: list[Callable[[PeerGone], None]] = []
        self._error: PeerGone | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = socket.create_server((host, 0), backlog=self.world_size)
        try:
            addrs = bootstrap.all_gather(server.getsockname()[:2])  # type: ignore[attr-defined]
            self._socks = self._mesh(server, addrs, connect_timeout)
        finally:
            server.close()
        now = time.monotonic()
        self._heard = dict.fromkeys(self._socks, now)
        self._thread = threading.Thread(target=self._run, daemon=True, name="sdr-liveness")
        self._thread.start()

    def _mesh(
        self, server: socket.socket, addrs: list[tuple[str, int]], timeout: float
    ) -> dict[int, socket.socket]:
        """Connect to every lower rank, accept every higher one; each side says its rank."""
        socks: dict[int, socket.socket] = {}
        for peer in range(self.rank):
            host, port = addrs[peer]
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.sendall(struct.pack("!I", self.rank))
            socks[peer] = sock
        server.settimeout(timeout)
        for _ in range(self.rank + 1, self.world_size):
            sock, _ = server.accept()
            sock.settimeout(timeout)
            (peer,) = struct.unpack("!I", _recv_exact(sock, 4))
            socks[peer] = sock
        for sock in socks.values():
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return socks

    # --- the thread --------------------------------------------------------------------
    def _run(self) -> None:
        next_beat = 0.0
        while not self._stop.is_set() and self._socks:
            now = time.monotonic()
            if now >= next_beat:
                for peer, sock in list(self._socks.items()):
                    try:
                        sock.send(_BEAT)
                    except BlockingIOError:
                        pass  # its buffer is full of our beats: it is alive but not reading
                    except OSError as exc:
                        self._gone(peer, f"its control connection failed ({exc.strerror})")
                next_beat = now + self.interval
            readable, _, _ = select.select(list(self._socks.values()), [], [], self.interval)
            now = time.monotonic()
            by_sock = {s: p for p, s in self._socks.items()}
            for sock in readable:
                self._read(by_sock[sock], sock, now)
            for peer, heard in list(self._heard.items()):
                if peer in self._socks and now - heard > self.silence:
                    self._gone(peer, f"no heartbeat for {now - heard:.1f} s")

    def _read(self, peer: int, sock: socket.socket, now: float) -> None:
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return
        except OSError as exc:
            self._gone(peer, f"its control connection failed ({exc.strerror})")
            return
        if not data:
            self._gone(peer, "its control connection closed (the process exited or was killed)")
        elif _ABANDON in data:
            self._gone(peer, "it closed its process group after an error")
        elif _BYE in data:
            self._gone(peer, "it left the process group", left=True)
        else:
            self._heard[peer] = now

    def _gone(self, peer: int, why: str, left: bool = False) -> None:
        sock = self._socks.pop(peer, None)
        if sock is not None:
            sock.close()
        error = PeerGone(f"sdr process group: peer {self._names(peer)} is gone: {why}")
        error.left = left
        with self._lock:
            if self._error is not None:
                return
            self._error = error
            callbacks = list(self._callbacks)
        log.debug("%s", error)
        for callback in callbacks:
            callback(error)

    # --- the API -----------------------------------------------------------------------
    @property
    def error(self) -> PeerGone | None:
        """The first peer found gone, or None."""
        return self._error

    def check(self) -> None:
        """Raise :class:`PeerGone` if any peer is gone."""
        if self._error is not None:
            raise self._error

    def on_failure(self, callback: Callable[[PeerGone], None]) -> None:
        """Call ``callback(error)`` once when the first peer is found gone (now, if it was)."""
        with self._lock:
            error = self._error
            if error is None:
                self._callbacks.append(callback)
        if error is not None:
            callback(error)

    def close(self, drained: bool = True) -> None:
        """Tell every peer we leave (after draining our links, or not), then close."""
        self._stop.set()
        self._thread.join(timeout=2 * self.interval + 1)
        for sock in self._socks.values():
            try:
                sock.send(_BYE if drained else _ABANDON)
            except OSError:
                pass
            sock.close()
        self._socks.clear()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise TransportError("control connection closed during set-up")
        data += part
    return data
