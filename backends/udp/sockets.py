"""Socket and memory set-up for the UDP datapath: large buffers, no fragmentation, pre-faulting.

Facts this relies on (docs/backends-udp.md): at 8-32 KiB datagrams a receiver that
falls behind for a millisecond needs megabytes of socket buffer, which Linux caps at
net.core.rmem_max / wmem_max unless the process may use SO_RCVBUFFORCE (root); and the
first write to a never-touched page of a large receive buffer costs a page fault, which
at these rates shows up as receive-side loss, so buffers are touched once up front.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import socket
from collections.abc import Callable

import numpy as np

from sdr.errors import TransportError

__all__ = [
    "DEFAULT_SOCKET_BUFFER",
    "ReceiveBufferWarning",
    "open_udp_socket",
    "prefault",
    "socket_drops",
    "sysctl_value",
]

log = logging.getLogger(__name__)

DEFAULT_SOCKET_BUFFER = 64 << 20
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
_IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
_IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
_PAGE = 4096
_MADV_POPULATE_WRITE = 23  # Linux >= 5.14: fault a range in, writable, in one call
_warned: set[str] = set()


def sysctl_value(name: str) -> int | None:
    """The integer value of a sysctl such as ``net.core.rmem_max`` (None if unreadable)."""
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class ReceiveBufferWarning(UserWarning):
    """The kernel dropped datagrams at a receiving socket: this host did not keep up."""


def socket_drops(
    socks: list[socket.socket], tables: tuple[str, ...] = ("/proc/net/udp", "/proc/net/udp6")
) -> int | None:
    """Datagrams the kernel dropped at these sockets since they opened (a full receive
    buffer: the process did not read fast enough), from the ``drops`` column of Linux's
    ``/proc/net/udp``; None where that table cannot be read or lists none of them."""
    inodes = {str(os.fstat(s.fileno()).st_ino) for s in socks if s.fileno() >= 0}
    found, total = 0, 0
    for table in tables:
        try:
            with open(table) as fh:
                lines = fh.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) >= 13 and fields[9] in inodes:
                found += 1
                total += int(fields[-1])
    return total if found else None


def _set_buffer(sock: socket.socket, opt: int, force: int, size: int, what: str) -> int:
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, opt, size)
    got = sock.getsockopt(socket.SOL_SOCKET, opt) // 2  # Linux reports twice the usable size
    if got < size and what not in _warned:
        _warned.add(what)
        limit = "net.core.rmem_max" if opt == socket.SO_RCVBUF else "net.core.wmem_max"
        log.warning(
            "UDP %s buffer is %d bytes, %d requested: not permitted to raise it (run "
            "`make system` as root or `sysctl -w %s=%d`); expect receive-side loss at high rates",
            what,
            got,
            size,
            limit,
            size,
        )
    return got


def open_udp_socket(
    host: str, port: int, buffer_size: int = DEFAULT_SOCKET_BUFFER
) -> socket.socket:
    """A non-blocking IPv4 UDP socket bound to (host, port) with large buffers and DF set.

    DF (IP_PMTUDISC_DO) makes the kernel emit identification 0 and never fragment, which
    is what the ICRC prediction assumes; a datagram larger than the path MTU fails with
    EMSGSIZE instead of being fragmented.
    """
    try:
        socket.inet_aton(host)
    except OSError as exc:
        raise TransportError(f"host {host!r} must be an IPv4 address such as 127.0.0.1") from exc
    if host == "0.0.0.0":
        raise TransportError("bind to a specific IPv4 address, not 0.0.0.0 (the ICRC covers it)")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
        if buffer_size:
            _set_buffer(sock, socket.SO_RCVBUF, _SO_RCVBUFFORCE, buffer_size, "receive")
            _set_buffer(sock, socket.SO_SNDBUF, _SO_SNDBUFFORCE, buffer_size, "send")
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = ""
        if exc.errno == errno.EADDRINUSE:
            hint = "; another process holds it: pass port=0 to take a free port"
        raise TransportError(f"cannot open UDP socket on {host}:{port}: {exc}{hint}") from exc
    sock.setblocking(False)
    return sock


def prefault(view: memoryview) -> None:
    """Fault every page of a writable buffer in once, without changing it.

    One ``madvise(MADV_POPULATE_WRITE)`` over the buffer's pages (the kernel populates the
    range in one call: about 10x less CPU than touching each page from here, measured on
    a 320 MiB file mapping, docs/benchmarks.md "CPU per byte"); where the kernel lacks it,
    every page is read and written back instead."""
    if len(view) == 0:
        return
    arr = np.frombuffer(view, dtype=np.uint8)
    if _populate(arr.ctypes.data, len(arr)):
        return
    arr[::_PAGE] = arr[::_PAGE].copy()
    arr[-1:] = arr[-1:].copy()


def _populate(address: int, length: int) -> bool:
    """madvise(MADV_POPULATE_WRITE) over the pages of [address, address + length); False
    when the kernel (or the platform) cannot, so the caller touches the pages itself."""
    madvise = _madvise()
    if madvise is None:
        return False
    start = address - address % _PAGE
    return madvise(start, address + length - start, _MADV_POPULATE_WRITE) == 0


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's madvise, or None off Linux."""
    if os.uname().sysname != "Linux":
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn
