"""Batched datagram I/O: Linux sendmmsg/recvmmsg through ctypes, with NumPy-built descriptors.

One system call moves up to a ring's capacity of datagrams. The kernel structures live in
NumPy arrays allocated once (x86-64/aarch64 Linux layout: iovec 16 bytes, msghdr 56,
mmsghdr 64, sockaddr_in 16), so filling a batch is a few vectorized assignments, not a
Python object per packet. Payload iovecs point straight into registered memory: the
kernel's copy is the only copy on the send side.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import socket
from collections.abc import Callable

import numpy as np

from sdr.errors import TransportError

__all__ = ["SendRing", "RecvRing", "address_of", "available"]

_MSG_DONTWAIT = 0x40
_IOV = 16
_MMSG = 64
_SOCKADDR = 16
_SEND_RETRY_S = 0.01


def _missing(*_args: object) -> int:  # pragma: no cover - not Linux
    raise TransportError("sendmmsg/recvmmsg are not available here (Linux only)")


_sendmmsg: Callable[..., int] = _missing
_recvmmsg: Callable[..., int] = _missing
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    _send, _receive = _libc.sendmmsg, _libc.recvmmsg
    _send.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    _receive.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    _send.restype = _receive.restype = ctypes.c_int
    _sendmmsg, _recvmmsg = _send, _receive
except (OSError, AttributeError):  # pragma: no cover - not Linux
    pass


def available() -> bool:
    """True where sendmmsg/recvmmsg exist (Linux with glibc or musl)."""
    return _sendmmsg is not _missing and ctypes.sizeof(ctypes.c_void_p) == 8


def address_of(view: memoryview) -> int:
    """The address of a writable buffer's first byte."""
    if len(view) == 0:
        return 0
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


def sockaddr_in(host: str, port: int) -> np.ndarray:
    """A struct sockaddr_in as 16 bytes."""
    raw = np.zeros(_SOCKADDR, dtype=np.uint8)
    raw[0:2] = np.frombuffer(socket.AF_INET.to_bytes(2, "little"), dtype=np.uint8)
    raw[2:4] = np.frombuffer(port.to_bytes(2, "big"), dtype=np.uint8)
    raw[4:8] = np.frombuffer(socket.inet_aton(host), dtype=np.uint8)
    return raw


class SendRing:
    """Descriptors for up to ``capacity`` datagrams of three parts: header, payload, tail."""

    def __init__(self, capacity: int, header_size: int, tail_size: int) -> None:
        if not available():
            raise TransportError("the UDP backend needs Linux sendmmsg/recvmmsg (64-bit)")
        self.capacity = capacity
        self.headers = np.zeros((capacity, header_size), dtype=np.uint8)
        self.tails = np.zeros((capacity, tail_size), dtype=np.uint8)
        self.iov = np.zeros((capacity, 3, 2), dtype=np.uint64)
        self.msgs = np.zeros((capacity, _MMSG // 8), dtype=np.uint64)
        self.peer = np.zeros(_SOCKADDR, dtype=np.uint8)
        rows = np.arange(capacity, dtype=np.uint64)
        self.iov[:, 0, 0] = self.headers.ctypes.data + rows * np.uint64(header_size)
        self.iov[:, 0, 1] = header_size
        self.iov[:, 2, 0] = self.tails.ctypes.data + rows * np.uint64(tail_size)
        self.msgs[:, 0] = self.peer.ctypes.data
        self.msgs[:, 1] = _SOCKADDR
        self.msgs[:, 2] = self.iov.ctypes.data + rows * np.uint64(3 * _IOV)
        self.msgs[:, 3] = 3

    def set_peer(self, host: str, port: int) -> None:
        self.peer[:] = sockaddr_in(host, port)

    def send(self, sock: socket.socket, count: int) -> None:
        """Send datagrams 0..count-1 (payload and tail iovecs filled by the caller)."""
        fd, base, done = sock.fileno(), self.msgs.ctypes.data, 0
        while done < count:
            sent = _sendmmsg(fd, base + done * _MMSG, count - done, 0)
            if sent > 0:
                done += sent
                continue
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.ENOBUFS, errno.EINTR):
                select.select([], [sock], [], _SEND_RETRY_S)  # send queue full: let it drain
                continue
            raise TransportError(f"sendmmsg: {os.strerror(err)} (errno {err})")


class RecvRing:
    """``capacity`` staging slots of ``slot_size`` bytes, pre-faulted, filled by recvmmsg."""

    def __init__(self, capacity: int, slot_size: int) -> None:
        if not available():
            raise TransportError("the UDP backend needs Linux sendmmsg/recvmmsg (64-bit)")
        self.capacity = capacity
        self.slot_size = slot_size
        self.slots = np.ones((capacity, slot_size), dtype=np.uint8)  # written: pages faulted in
        self.names = np.zeros((capacity, _SOCKADDR), dtype=np.uint8)
        self.iov = np.zeros((capacity, 2), dtype=np.uint64)
        self.msgs = np.zeros((capacity, _MMSG // 8), dtype=np.uint64)
        rows = np.arange(capacity, dtype=np.uint64)
        self.iov[:, 0] = self.slots.ctypes.data + rows * np.uint64(slot_size)
        self.iov[:, 1] = slot_size
        self.msgs[:, 0] = self.names.ctypes.data + rows * np.uint64(_SOCKADDR)
        self.msgs[:, 2] = self.iov.ctypes.data + rows * np.uint64(_IOV)
        self.msgs[:, 3] = 1
        self.view = self.slots.data.cast("B")

    def receive(self, sock: socket.socket, max_count: int) -> int:
        """Datagrams now in slots 0..n-1 (n = return value, 0 when none was waiting)."""
        count = min(max_count, self.capacity)
        self.msgs[:count, 1] = _SOCKADDR  # namelen in, and msg_flags/msg_len reset
        self.msgs[:count, 6:8] = 0
        got = _recvmmsg(sock.fileno(), self.msgs.ctypes.data, count, _MSG_DONTWAIT, None)
        if got >= 0:
            return got
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EINTR):
            return 0
        raise TransportError(f"recvmmsg: {os.strerror(err)} (errno {err})")

    def lengths(self, count: int) -> np.ndarray:
        """Byte lengths of the received datagrams (truncated ones are longer than a slot)."""
        return (self.msgs[:count, 7] & np.uint64(0xFFFFFFFF)).astype(np.int64)

    def sources(self, count: int) -> np.ndarray:
        """Source (IPv4 address << 16 | port) of each datagram, as int64."""
        names = self.names[:count]
        port = names[:, 2].astype(np.int64) << 8 | names[:, 3]
        ip = names[:, 4:8].astype(np.int64)
        return (ip[:, 0] << 40) | (ip[:, 1] << 32) | (ip[:, 2] << 24) | (ip[:, 3] << 16) | port
