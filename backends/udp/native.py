"""The UDP backend's native loops (backends/udp/_datapath.c): the ICRC, the receive pass,
the send pass.

The Python reference for each is in this package (``Receiver._process`` in receive.py,
``UdpQP._post_slice`` in qp.py); :func:`active` says which runs. One switch chooses for
the whole software datapath: :func:`sdr.placement.use_datapath` (or ``SDR_DATAPATH`` at
import). ``SDR_UDP_NATIVE`` names another build of the module to load (``make asan``).

GSO and GRO (``UDP_SEGMENT``, ``UDP_GRO``, Linux 4.18 and 5.0) are used by the native
loops only: with GSO one ``sendmmsg`` message carries up to 64 equal-sized packets, which
the kernel cuts into datagrams; with GRO one receive returns several datagrams of one
flow back to back, and the receive pass splits them at the size the kernel reports.

The module's interface is named, not positional: the receive pass reads one
:class:`ReceiveTables` (its attributes are the module's ``TABLES``), writes counters whose
names and order are the module's (``COUNTERS``, ``DISCARDS``, ``LISTED``), and the send
pass returns a ``SendResult`` (packets and IP bytes that left, the errno that stopped it,
whether the kernel refused GSO). :func:`check_names` holds the module's names to the ones
this package counts under, at import: a build whose order differs fails to import
rather than miscounting.
"""

from __future__ import annotations

import dataclasses
import errno
import socket
import warnings
from types import ModuleType

import numpy as np

from sdr import placement
from sdr.native import load_extension

__all__ = [
    "COUNTERS",
    "DISCARDS",
    "LISTED",
    "NATIVE_ERROR",
    "WOULD_BLOCK",
    "ReceiveTables",
    "active",
    "check_names",
    "checksums_off",
    "crc_implementation",
    "module",
    "set_gro",
    "supports_gso",
]

COUNTERS = ("runt", "bad_opcode", "unknown_qpn")
"""Transport-wide counters of the receive pass, in the order of its ``counters`` array."""
DISCARDS = ("bad_source", "bad_length", "bad_icrc", "bad_rkey")
"""Per-QP discards of the receive pass, the columns of its ``discards`` table."""
LISTED = ("endpoint", "offset", "length", "va", "imm", "crc")
"""The rows of the receive pass's ``listed`` table: per segment that passed, its
endpoint, staging offset of the payload, payload length, RETH address, immediate, and
zlib's CRC-32 of the payload (the chunk checksums are combined from these)."""
WOULD_BLOCK = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS, errno.EINTR})
"""A send's ``error`` when the send queue stayed full for its wait bound: not a fault."""


@dataclasses.dataclass(slots=True)
class ReceiveTables:
    """Everything the native receive pass reads and writes but the socket, in one object
    (its field names are the module's ``TABLES``; the pass reads them once per call and
    checks every array's size before it writes anything)."""

    staging: np.ndarray
    """The staging slots (writable bytes), ``slot_size`` bytes each."""
    slot_size: int
    local_ip: int
    """This receiver's IPv4 address (host order) and port: the ICRC covers them."""
    local_port: int
    verify: bool
    """Check every segment's ICRC."""
    qpns: np.ndarray
    """The QPN table (sorted QPNs, their endpoints, each endpoint's rkey and owning QP,
    each QP's peer as ip << 16 | port): :class:`sdr.backends.udp.qpn_table.QpnTable`."""
    order: np.ndarray
    rkeys: np.ndarray
    owner: np.ndarray
    peer_sources: np.ndarray
    listed: np.ndarray
    """(len(LISTED), capacity) int64: the segments that passed, one column each."""
    counters: np.ndarray
    """(len(COUNTERS),) int64, added to."""
    discards: np.ndarray
    """(QPs, len(DISCARDS)) int64, added to."""


def check_names(mod: object) -> None:
    """Raise ImportError unless the module ``mod`` counts, lists and reads under exactly
    the names (and order) this package uses: COUNTERS, DISCARDS, LISTED, TABLES."""
    expected = {
        "COUNTERS": COUNTERS,
        "DISCARDS": DISCARDS,
        "LISTED": LISTED,
        "TABLES": tuple(field.name for field in dataclasses.fields(ReceiveTables)),
    }
    for name, want in expected.items():
        got = getattr(mod, name, None)
        if got != want:
            raise ImportError(
                f"sdr.backends.udp._datapath {name} is {got!r}, backends/udp/native.py "
                f"expects {want!r}: rebuild the extension (pip install -e .) or update both"
            )


FILE_ENV = "SDR_UDP_NATIVE"
module: ModuleType | None
module, NATIVE_ERROR = load_extension("sdr.backends.udp._datapath", FILE_ENV)
if module is not None:
    check_names(module)  # a mismatch fails here, loudly, not as wrong counts later
elif placement.DATAPATH == "native":
    warnings.warn(
        f"sdr.backends.udp._datapath is not built ({NATIVE_ERROR}): the UDP backend sends "
        "and receives with the Python reference",
        RuntimeWarning,
        stacklevel=2,
    )

SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
SO_NO_CHECK = 11  # Linux: send UDP/IPv4 without a checksum


def active() -> bool:
    """True when the native loops run (built, and the datapath switch says native)."""
    return module is not None and placement.DATAPATH == "native"


def crc_implementation() -> str:
    """The native CRC-32: ``pclmul`` (carry-less multiply folding), ``table``, or ``none``."""
    return "none" if module is None else str(module.implementation())


def supports_gso(sock: socket.socket) -> bool:
    """Whether this kernel takes ``UDP_SEGMENT`` on the socket."""
    try:
        sock.getsockopt(SOL_UDP, UDP_SEGMENT)
    except OSError:
        return False
    return True


def checksums_off(sock: socket.socket) -> bool:
    """Whether the socket sends without UDP checksums (``SO_NO_CHECK``): the kernel
    refuses GSO on such a socket (EINVAL); the send pass then sends one datagram per
    message and reports ``gso_refused``."""
    try:
        return bool(sock.getsockopt(socket.SOL_SOCKET, SO_NO_CHECK))
    except OSError:
        return False


def set_gro(sock: socket.socket, on: bool) -> bool:
    """Turn ``UDP_GRO`` on or off; False when the kernel does not have it."""
    try:
        sock.setsockopt(SOL_UDP, UDP_GRO, int(on))
    except OSError:
        return False
    return True
