"""Several emulated paths between the same two namespaces, chosen by UDP port (root).

    specs = [LinkSpec(rate="200Mbit/s", rtt="25ms")] * 3 + [LinkSpec(..., loss=1e-2)]
    with MultiPathTunLink(specs, ports=range(19000, 19004)) as link:
        # B: sdr recv --data-port 19000 (ports 19000..19003); A: sdr send --paths 4
        ...
    link.summaries   # what each path did, as TunLink.summary

Path ``i`` is its own pair of TUN devices with its own forwarder process and
:class:`LinkSpec`. A UDP datagram from A to B's port ``ports[i]`` takes path ``i`` (a
policy route in A: ``ip rule ... ipproto udp dport``, the way an ECMP switch hashes the
5-tuple, but chosen); everything else (TCP, SDR's control traffic, all of B to A) takes
path 0, whose devices carry the namespaces' addresses. B accepts data for its address
on any of its devices (reverse-path filtering off).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from typing import Any

from sdr.backends.wan.emulator import _ForwardingLink
from sdr.backends.wan.namespaces import NamespacePair, netns_exec
from sdr.backends.wan.tun import TunDevice
from sdr.errors import ConfigError, TransportError
from sdr.simulator.link_model import LinkSpec

__all__ = ["MultiPathTunLink", "MAX_EMULATED_PATHS"]

MAX_EMULATED_PATHS = 16
_TABLE = 100  # policy routing tables 101.. for paths 1..


def _ip(namespace: str, *args: str) -> None:
    done = subprocess.run(
        ["ip", "-n", namespace, *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise TransportError(f"ip -n {namespace} {' '.join(args)}: {done.stderr.strip()}")


def _sysctl(namespace: str, key: str, value: str) -> None:
    subprocess.run(netns_exec(namespace, "sysctl", "-qw", f"{key}={value}"), capture_output=True)


class MultiPathTunLink:
    """``len(specs)`` paths from namespace A to B; path ``i`` carries UDP to ``ports[i]``."""

    def __init__(
        self,
        specs: Sequence[LinkSpec],
        ports: Iterable[int],
        mtu: int = 9000,
        forwarder: str | None = None,
    ) -> None:
        self.specs = list(specs)
        self.ports = [int(p) for p in ports]
        if not 1 <= len(self.specs) <= MAX_EMULATED_PATHS:
            raise ConfigError(f"1 to {MAX_EMULATED_PATHS} paths, got {len(self.specs)}")
        if len(self.ports) != len(self.specs):
            raise ConfigError(f"{len(self.specs)} paths need as many ports, got {self.ports}")
        if len(set(self.ports)) != len(self.ports) or not all(0 < p < 65536 for p in self.ports):
            raise ConfigError(f"ports must be distinct, in [1, 65535]: got {self.ports}")
        self.mtu = mtu
        self.requested = forwarder
        self.pair = NamespacePair(mtu=mtu)
        self.ns_a, self.ns_b = self.pair.a, self.pair.b
        self.addr_a, self.addr_b = self.pair.addr_a, self.pair.addr_b
        self.links = [
            _ForwardingLink(spec, None, corrupt_skip=28, forwarder=forwarder, max_packet=mtu)
            for spec in self.specs
        ]
        self._devices: list[TunDevice] = []
        self.summaries: list[dict[str, Any]] = []
        """One per path once the link is closed (drops by cause, lateness ...)."""

    @property
    def alive(self) -> bool:
        """Every path's forwarder still runs."""
        return all(link.alive for link in self.links)

    def __enter__(self) -> MultiPathTunLink:
        self.pair.__enter__()
        try:
            assert self.pair.tun_a is not None and self.pair.tun_b is not None
            pairs = [(self.pair.tun_a, self.pair.tun_b)]
            for i in range(1, len(self.specs)):
                pairs.append(self._add_path(i))
            for key in ("all", "default"):
                _sysctl(self.ns_b, f"net.ipv4.conf.{key}.rp_filter", "0")
            for link, pair in zip(self.links, pairs, strict=True):
                link._start([pair])
        except BaseException:
            self._close()
            raise
        return self

    def _add_path(self, i: int) -> tuple[TunDevice, TunDevice]:
        """TUN devices for path ``i`` in A and B, and A's policy route onto it."""
        ends = []
        for ns, side in ((self.ns_a, "a"), (self.ns_b, "b")):
            tun = TunDevice(f"sdrp{i}{side}{os.getpid() % 100000}")
            self._devices.append(tun)
            subprocess.run(["ip", "link", "set", tun.name, "netns", ns], check=True)
            _ip(ns, "link", "set", tun.name, "mtu", str(self.mtu), "txqueuelen", "10000", "up")
            _sysctl(ns, f"net.ipv4.conf.{tun.name}.rp_filter", "0")
            ends.append(tun)
        table = str(_TABLE + i)
        name_a = ends[0].name
        _ip(self.ns_a, "route", "add", f"{self.addr_b}/32", "dev", name_a, "src", self.addr_a,
            "table", table)  # fmt: skip
        _ip(self.ns_a, "rule", "add", "ipproto", "udp", "dport", str(self.ports[i]),
            "lookup", table)  # fmt: skip
        return ends[0], ends[1]

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        for link in self.links:
            link._stop_forwarder()
        self.summaries = [dict(link.summary) for link in self.links]
        for tun in self._devices:
            tun.close()
        self._devices = []
        self.pair.close()
