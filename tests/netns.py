"""Two network namespaces joined by a veth pair, for tests that need a real link.

Usage (a pytest fixture is the usual wrapper)::

    with veth_pair(mtu=9000) as link:
        link.run("a", ["ip", "addr"])            # run a command inside namespace a
        proc = link.popen("b", [sys.executable, "-m", "..."])
        link.a_addr, link.b_addr                 # 10.x.y.1 and 10.x.y.2

Needs root (``ip netns add``). Names and the /30 subnet are unique per process, so
parallel runs do not collide, and everything is torn down on exit, also on error.
IPv6 is disabled inside the namespaces to keep stray traffic off the link.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["VethLink", "netns_available", "veth_pair"]


def netns_available() -> str | None:
    """None when namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (the ip command) is not installed"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class VethLink:
    """Namespaces ``ns_a``/``ns_b`` with addresses ``a_addr``/``b_addr`` on one veth link."""

    ns_a: str
    ns_b: str
    a_addr: str
    b_addr: str
    mtu: int

    def ns(self, side: str) -> str:
        return {"a": self.ns_a, "b": self.ns_b}[side]

    def wrap(self, side: str, cmd: Sequence[str]) -> list[str]:
        """``cmd`` prefixed to run inside namespace ``side`` ("a" or "b")."""
        return ["ip", "netns", "exec", self.ns(side), *cmd]

    def run(self, side: str, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """Run a command inside a namespace (captures text output unless told otherwise)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.wrap(side, cmd), **kwargs)

    def popen(self, side: str, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start a command inside a namespace."""
        return subprocess.Popen(self.wrap(side, cmd), **kwargs)


@contextmanager
def veth_pair(mtu: int = 9000, tag: str = "sdr") -> Iterator[VethLink]:
    """Create two namespaces joined by veth (``mtu`` bytes), delete them on exit."""
    reason = netns_available()
    if reason:
        raise RuntimeError(reason)
    uid = f"{os.getpid() % 100000}"
    ns_a, ns_b = f"{tag}a{uid}", f"{tag}b{uid}"
    dev_a, dev_b = f"{tag}va{uid}"[:15], f"{tag}vb{uid}"[:15]
    net = os.getpid() % 250 + 1
    a_addr, b_addr = f"10.213.{net}.1", f"10.213.{net}.2"
    made: list[str] = []
    try:
        for ns in (ns_a, ns_b):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", dev_a, "mtu", str(mtu), "type", "veth", "peer", "name", dev_b)
        _ip("link", "set", dev_a, "netns", ns_a)
        _ip("link", "set", dev_b, "netns", ns_b)
        for ns, dev, addr in ((ns_a, dev_a, a_addr), (ns_b, dev_b, b_addr)):
            for key in ("all", "default"):
                subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "sysctl",
                        "-q",
                        "-w",
                        f"net.ipv6.conf.{key}.disable_ipv6=1",
                    ],
                    capture_output=True,
                )
            _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "mtu", str(mtu), "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield VethLink(ns_a, ns_b, a_addr, b_addr, mtu)
    finally:
        for ns in made:  # deleting a namespace deletes its end of the veth, and so the pair
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
