"""A userspace WAN emulator: the simulator's link model applied to real packets.

Modes: :class:`TunLink` (two network namespaces joined by TUN devices; root; carries any
IP traffic: kernel TCP, QUIC, SDR over UDP) and :class:`RelayLink` (a UDP relay on
loopback; no root).
"""

from sdr.backends.wan.emulator import RelayLink, TunLink, reverse_of
from sdr.backends.wan.impairment import LinkDirection, LinkSpec, Verdict
from sdr.backends.wan.namespaces import (
    NamespacePair,
    can_use_namespaces,
    enter_namespace,
    netns_exec,
)

__all__ = [
    "LinkDirection",
    "LinkSpec",
    "NamespacePair",
    "RelayLink",
    "TunLink",
    "Verdict",
    "can_use_namespaces",
    "enter_namespace",
    "netns_exec",
    "reverse_of",
]
