"""Two network namespaces joined through TUN devices held by this process.

    with NamespacePair() as pair:       # root needed
        pair.a, pair.b                  # namespace names
        pair.tun_a, pair.tun_b          # TunDevice, read/written by the forwarder
    NamespacePair(offload=True)         # TUN offloads where the kernel has them (tun.py)
        pair.addr_a, pair.addr_b        # 10.200.0.1 and 10.200.0.2 (peer-to-peer)

Everything is torn down on exit, on an exception and on Ctrl-C; namespaces left behind
by a killed run are removed by :func:`remove_stale` (their creator's pid is in the name).
"""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess

from sdr.backends.wan.tun import TunDevice
from sdr.errors import TransportError

__all__ = ["NamespacePair", "enter_namespace", "netns_exec", "remove_stale", "can_use_namespaces"]

log = logging.getLogger(__name__)

PREFIX = "sdrwan"
GSO_MAX_SEGS = 64  # the native forwarder's MAX_SEGS
_CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode:
        raise TransportError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def can_use_namespaces() -> str | None:
    """None when namespaces and TUN work here, else the reason they do not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and TUN devices)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if subprocess.run(["which", "ip"], capture_output=True).returncode:
        return "iproute2 ('ip') is not installed"
    return None


def netns_exec(namespace: str, *command: str) -> list[str]:
    """A command line that runs ``command`` inside ``namespace``."""
    return ["ip", "netns", "exec", namespace, *command]


def enter_namespace(namespace: str) -> None:
    """Move the calling process (e.g. a fresh child) into ``namespace``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise TransportError(f"setns({namespace}) failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def remove_stale() -> list[str]:
    """Delete namespaces of ours whose creating process is gone; returns their names."""
    listed = _ip("netns", "list", check=False).stdout.split()
    removed = []
    for name in listed:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].rstrip("ab")
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


class NamespacePair:
    """Namespaces A and B, each with a TUN device whose other end is this process."""

    def __init__(
        self,
        mtu: int = 9000,
        addr_a: str = "10.200.0.1",
        addr_b: str = "10.200.0.2",
        tag: str | None = None,
        offload: bool = False,
    ) -> None:
        reason = can_use_namespaces()
        if reason:
            raise TransportError(f"cannot emulate a link through namespaces: {reason}")
        tag = tag or str(os.getpid())
        self.a, self.b = f"{PREFIX}{tag}a", f"{PREFIX}{tag}b"
        self.addr_a, self.addr_b = addr_a, addr_b
        self.mtu = mtu
        self.offload = offload
        """Ask for TUN offloads (IFF_VNET_HDR; see :class:`TunDevice`); ``tun_a.offload``
        says what the kernel took."""
        self.tun_a: TunDevice | None = None
        self.tun_b: TunDevice | None = None

    def __enter__(self) -> NamespacePair:
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _setup(self) -> None:
        remove_stale()
        for ns, tun_name, local, peer in (
            (self.a, "sdrtuna", self.addr_a, self.addr_b),
            (self.b, "sdrtunb", self.addr_b, self.addr_a),
        ):
            _ip("netns", "add", ns)
            tun = TunDevice(f"{tun_name}{os.getpid() % 100000}", offload=self.offload)
            if ns == self.a:
                self.tun_a = tun
            else:
                self.tun_b = tun
            _ip("link", "set", tun.name, "netns", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", local, "peer", peer, "dev", tun.name)
            _ip(
                "-n", ns, "link", "set", tun.name, "mtu", str(self.mtu), "txqueuelen", "10000", "up"
            )
            if tun.offload:  # a GSO packet the forwarder reads is at most MAX_SEGS packets
                _ip("-n", ns, "link", "set", tun.name, "gso_max_segs", str(GSO_MAX_SEGS))
            for key, value in (
                ("net.ipv6.conf.all.disable_ipv6", "1"),
                ("net.ipv6.conf.default.disable_ipv6", "1"),
                ("net.core.rmem_max", "67108864"),
                ("net.core.wmem_max", "67108864"),
            ):
                subprocess.run(
                    netns_exec(ns, "sysctl", "-qw", f"{key}={value}"), capture_output=True
                )
        log.info("namespaces %s (%s) <-> %s (%s) up", self.a, self.addr_a, self.b, self.addr_b)

    def close(self) -> None:
        """Close the TUN devices and delete both namespaces (idempotent)."""
        for tun in (self.tun_a, self.tun_b):
            if tun is not None:
                tun.close()
        self.tun_a = self.tun_b = None
        for ns in (self.a, self.b):
            _ip("netns", "del", ns, check=False)
