"""The out-of-band channel: length-prefixed JSON over one TCP connection.

Used to exchange QP info and configuration before a transfer (as perftest does) and small
verdicts after it (``sdr send/recv``, ``sdr write-bw``). The data never goes this way.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

from sdr.errors import ProtocolError, TransportError

__all__ = ["send_obj", "recv_obj", "read_exact", "listen", "connect", "DEFAULT_PORT"]

DEFAULT_PORT = 18515  # perftest's default exchange port
_LEN = struct.Struct("!I")
_MAX = 1 << 20


def send_obj(sock: socket.socket, obj: Any) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def read_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from a stream socket; TransportError if the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise TransportError("peer closed the out-of-band connection")
        buf += part
    return bytes(buf)


def recv_obj(sock: socket.socket) -> Any:
    (size,) = _LEN.unpack(read_exact(sock, _LEN.size))
    if size > _MAX:
        raise ProtocolError(f"out-of-band message of {size} bytes exceeds {_MAX}")
    try:
        return json.loads(read_exact(sock, size))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"out-of-band message is not JSON: {exc}") from exc


def listen(host: str, port: int) -> socket.socket:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(1)
    return srv


def connect(host: str, port: int, timeout: float = 30.0) -> socket.socket:
    """Connect, retrying while the peer is not listening yet (up to ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((host, port), timeout=timeout)
        except (ConnectionRefusedError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise TransportError(f"cannot reach {host}:{port}: {exc}") from exc
            time.sleep(0.05)
