"""TUN devices: IP packets in and out of a file descriptor (IFF_TUN | IFF_NO_PI)."""

from __future__ import annotations

import fcntl
import os
import struct

from sdr.errors import TransportError

__all__ = ["TunDevice"]

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_READ_SIZE = 65536


class TunDevice:
    """A TUN interface held open by this process (it vanishes when closed)."""

    def __init__(self, name: str) -> None:
        if len(name) > 15:
            raise TransportError(f"interface name {name!r} is longer than 15 characters")
        try:
            self.fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        except OSError as exc:
            raise TransportError(f"cannot open /dev/net/tun: {exc} (root needed)") from exc
        try:
            fcntl.ioctl(
                self.fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI)
            )
        except OSError as exc:
            os.close(self.fd)
            raise TransportError(f"cannot create TUN device {name}: {exc}") from exc
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
