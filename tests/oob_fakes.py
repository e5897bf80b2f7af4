"""Hostile and recording peers for the out-of-band set-up of ``sdr send`` / ``sdr recv``.

The wire is written out here (a 4-byte big-endian length, then JSON), not taken from
``sdr.backends.oob``, so the tests say what travels and a change of the framing shows.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import sdr

_LEN = struct.Struct("!I")
WAIT_S = 10.0
"""How long a fake peer waits for one frame (the real commands answer at once)."""


def frame(obj: Any) -> bytes:
    """One out-of-band frame carrying ``obj``."""
    data = json.dumps(obj).encode()
    return _LEN.pack(len(data)) + data


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise EOFError(f"peer closed after {len(buf)} of {n} bytes")
        buf += part
    return buf


def read_body(sock: socket.socket) -> bytes:
    """The JSON bytes of the next frame."""
    (size,) = _LEN.unpack(_exact(sock, _LEN.size))
    return _exact(sock, size)


def read_frame(sock: socket.socket) -> Any:
    """The next frame's object."""
    return json.loads(read_body(sock))


def read_frames(sock: socket.socket) -> list[Any]:
    """Every frame until the peer closes (or stays silent for :data:`WAIT_S`)."""
    out = []
    try:
        while True:
            out.append(read_frame(sock))
    except (EOFError, OSError):
        return out


def dial(port: int) -> socket.socket:
    """A connection to a receiver's out-of-band port, reads bounded by :data:`WAIT_S`."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def hello(challenge: Any, size: int | Any = 1 << 20, **fields: Any) -> dict[str, Any]:
    """A sender's hello as ``sdr send`` writes it (unsigned), with ``fields`` replaced."""
    attr = sdr.QPAttr(mtu=1024, chunk_size="64KiB", max_message_size="1MiB", max_messages=63)
    body = {
        "name": "in.bin",
        "size": size,
        "message_size": attr.max_message_size,
        "attr": attr.as_dict(),
        "reliability": {"scheme": "sr-rto", "rtt": 0.005},
        "qp": "{}",
        "challenge": challenge,
    }
    body.update(fields)
    return body


class Listener:
    """A TCP listener on a free loopback port standing in for a receiver."""

    def __init__(self) -> None:
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(1)
        self.srv.settimeout(WAIT_S * 3)
        self.port = int(self.srv.getsockname()[1])

    def accept(self) -> socket.socket:
        conn, _ = self.srv.accept()
        conn.settimeout(WAIT_S)
        return conn

    def close(self) -> None:
        self.srv.close()


class OobProxy:
    """Carries one out-of-band connection from ``sdr send`` to a receiver's ``port``,
    recording every frame each way; ``edit`` may rewrite the sender's first frame (its
    hello) before it goes on. The UDP data does not cross it (QP info is not rewritten)."""

    def __init__(self, port: int, edit: Callable[[bytes], bytes] | None = None) -> None:
        self.listener = Listener()
        self.port = self.listener.port
        self.to_receiver: list[bytes] = []
        self.to_sender: list[bytes] = []
        self._target, self._edit = port, edit
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            sender = self.listener.accept()
        except OSError:
            return
        receiver = socket.create_connection(("127.0.0.1", self._target))
        for s in (sender, receiver):
            s.settimeout(None)
        back = threading.Thread(target=self._pump, args=(receiver, sender, self.to_sender, None))
        back.start()
        self._pump(sender, receiver, self.to_receiver, self._edit)
        back.join()
        sender.close()
        receiver.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, log: list[bytes], edit: Any) -> None:
        try:
            while True:
                body = read_body(src)
                log.append(body)
                if edit is not None and len(log) == 1:
                    body = edit(body)
                dst.sendall(_LEN.pack(len(body)) + body)
        except (EOFError, OSError):
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def join(self, timeout: float = WAIT_S * 3) -> None:
        self._thread.join(timeout)
        self.listener.close()
