"""TUN devices: IP packets in and out of a file descriptor (IFF_TUN | IFF_NO_PI).

With ``offload=True`` the device is opened with IFF_VNET_HDR and offloads are asked for
(TUNSETOFFLOAD: checksum, TSO for IPv4/IPv6, and UDP segmentation, USO, where the kernel
has it: 6.2 and later). Then every read and write carries a ``virtio_net_hdr`` and a read
may be a GSO packet of up to 64 KiB: only the native forwarder reads such a device.
Where the kernel refuses TUNSETOFFLOAD the device is reopened without the header
(``offload`` is then 0).
"""

from __future__ import annotations

import fcntl
import os
import struct

from sdr.errors import TransportError

__all__ = ["OFFLOAD_SETS", "TUN_F_CSUM", "TUN_F_TSO4", "TUN_F_TSO6", "TUN_F_USO4", "TunDevice"]

_TUNSETIFF = 0x400454CA
_TUNSETOFFLOAD = 0x400454D0
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_IFF_VNET_HDR = 0x4000
_READ_SIZE = 65536

TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_USO4, TUN_F_USO6 = 0x01, 0x02, 0x04, 0x20, 0x40
OFFLOAD_SETS = (
    TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_USO4 | TUN_F_USO6,
    TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6,  # kernels before 6.2: no USO
)
"""The offload sets asked for, in order: the first the kernel takes is kept."""


def _open(name: str, flags: int) -> int:
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    except OSError as exc:
        raise TransportError(f"cannot open /dev/net/tun: {exc} (root needed)") from exc
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), flags))
    except OSError as exc:
        os.close(fd)
        raise TransportError(f"cannot create TUN device {name}: {exc}") from exc
    return fd


def _set_offload(fd: int) -> int:
    """The first of OFFLOAD_SETS the kernel takes (0: none)."""
    for flags in OFFLOAD_SETS:
        try:
            fcntl.ioctl(fd, _TUNSETOFFLOAD, flags)
        except OSError:
            continue
        return flags
    return 0


class TunDevice:
    """A TUN interface held open by this process (it vanishes when closed)."""

    def __init__(self, name: str, offload: bool = False) -> None:
        if len(name) > 15:
            raise TransportError(f"interface name {name!r} is longer than 15 characters")
        self.offload = 0
        """TUN_F_* flags the kernel took; nonzero: reads and writes carry a virtio header."""
        self.fd = -1
        if offload:
            self.fd = _open(name, _IFF_TUN | _IFF_NO_PI | _IFF_VNET_HDR)
            self.offload = _set_offload(self.fd)
            if not self.offload:
                os.close(self.fd)
        if not self.offload:
            self.fd = _open(name, _IFF_TUN | _IFF_NO_PI)
        self.name = name

    def fileno(self) -> int:
        return self.fd

    def read_many(self, limit: int) -> list[bytes]:
        out = []
        read, fd = os.read, self.fd
        for _ in range(limit):
            try:
                out.append(read(fd, _READ_SIZE))
            except BlockingIOError:
                break
        return out

    def write(self, packet: bytes) -> None:
        try:
            os.write(self.fd, packet)
        except OSError:
            pass  # interface down or queue full: the packet is lost, as on a wire

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
