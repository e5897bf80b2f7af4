"""The out-of-band channel: length-prefixed JSON over one TCP connection.

Used to exchange QP info and configuration before a transfer (as perftest does) and small
verdicts after it (``sdr send/recv``, ``sdr write-bw``). The data never goes this way.

The connection stays open for the whole transfer, so it doubles as a liveness signal: a
peer that exits or is killed closes it at once (:func:`poll_obj` reports that), and TCP
keepalive (:func:`keepalive`) notices a peer whose host vanished within a few seconds.

A wait on the peer can carry a ``deadline`` (``time.monotonic()`` seconds) for the whole
message, not per ``recv()``: a peer that trickles a byte at a time cannot hold a reader
past it (:class:`sdr.TimeoutError`). Bytes already received are read even at the deadline.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from sdr.errors import RemoteProtocolError, TransportError
from sdr.errors import TimeoutError as SDRTimeoutError

__all__ = [
    "send_obj",
    "recv_obj",
    "poll_obj",
    "read_exact",
    "listen",
    "connect",
    "keepalive",
    "DEFAULT_PORT",
]

DEFAULT_PORT = 18515  # perftest's default exchange port
_LEN = struct.Struct("!I")
_MAX = 1 << 20
_RETRY_S = 0.05


def send_obj(sock: socket.socket, obj: Any) -> None:
    """Send one JSON object, length-prefixed."""
    data = json.dumps(obj).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def read_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """Exactly ``n`` bytes from a stream socket; TransportError if the peer closes first,
    sdr.TimeoutError if they are not all in by ``deadline`` (monotonic s; None: wait)."""
    buf = bytearray()
    saved = sock.gettimeout()
    try:
        while len(buf) < n:
            if deadline is not None:
                sock.settimeout(max(deadline - time.monotonic(), 0.0))  # 0: what is there
            try:
                part = sock.recv(n - len(buf))
            except (BlockingIOError, TimeoutError):
                if deadline is None:
                    raise
                raise SDRTimeoutError(
                    f"out-of-band message incomplete at the deadline ({len(buf)} of {n} bytes)"
                ) from None
            if not part:
                raise TransportError("peer closed the out-of-band connection")
            buf += part
    finally:
        if deadline is not None:
            sock.settimeout(saved)
    return bytes(buf)


def recv_obj(sock: socket.socket, deadline: float | None = None) -> Any:
    """Receive one JSON object; TransportError if the peer closes first, sdr.TimeoutError
    if the whole message is not in by ``deadline`` (monotonic s; None: block)."""
    (size,) = _LEN.unpack(read_exact(sock, _LEN.size, deadline))
    if size > _MAX:
        raise RemoteProtocolError(f"out-of-band message of {size} bytes exceeds {_MAX}")
    try:
        return json.loads(read_exact(sock, size, deadline))
    except (ValueError, RecursionError) as exc:
        raise RemoteProtocolError(f"out-of-band message is not JSON: {exc}") from exc


def poll_obj(sock: socket.socket, deadline: float | None = None) -> Any | None:
    """A message if the peer sent one, None if nothing is waiting (never blocks then).

    TransportError when the peer closed the connection or it was reset: the peer is gone.
    A message that has begun must be complete by ``deadline`` (sdr.TimeoutError).
    """
    if not select.select([sock], [], [], 0)[0]:
        return None
    try:
        peek = sock.recv(1, socket.MSG_PEEK)
    except ConnectionError as exc:
        raise TransportError(f"out-of-band connection lost: {exc}") from exc
    if not peek:
        raise TransportError("peer closed the out-of-band connection")
    return recv_obj(sock, deadline)


def keepalive(sock: socket.socket, idle: int = 1, interval: int = 1, count: int = 3) -> None:
    """Enable TCP keepalive: a silent, vanished peer resets the connection after about
    ``idle + interval * count`` s (the options that the platform lacks are skipped)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPINTVL", interval),
        ("TCP_KEEPCNT", count),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(1)
    return srv


def connect(
    host: str,
    port: int,
    timeout: float = 30.0,
    waiting: Callable[[], None] | None = None,
) -> socket.socket:
    """Connect, retrying while the peer is not listening yet (up to ``timeout`` s in all).

    ``waiting`` is called once, at the first refusal, so that a caller can say it waits.
    The socket returned blocks (no timeout) and has TCP keepalive enabled.
    """
    deadline = time.monotonic() + timeout
    told = False
    while True:
        left = deadline - time.monotonic()
        try:
            sock = socket.create_connection((host, port), timeout=max(left, _RETRY_S))
        except OSError as exc:
            if time.monotonic() + _RETRY_S >= deadline:
                raise TransportError(
                    f"cannot reach {host}:{port} within {timeout:g} s: {exc}"
                ) from exc
            if waiting is not None and not told:
                told = True
                waiting()
            time.sleep(_RETRY_S)
            continue
        sock.settimeout(None)
        keepalive(sock)
        return sock
