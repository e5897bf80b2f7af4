"""A userspace WAN emulator: the simulator's link model applied to real packets.

The link is :mod:`sdr.simulator.link_model` (``LinkSpec``, ``LinkDirection``), the same one
the discrete-event simulator schedules; it is re-exported here.

Modes: :class:`TunLink` (two network namespaces joined by TUN devices; root; carries any
IP traffic: kernel TCP, QUIC, SDR over UDP) and :class:`RelayLink` (a UDP relay on
loopback; no root).
"""

from sdr.backends.wan.emulator import RelayLink, TunLink, reverse_of
from sdr.backends.wan.namespaces import (
    NamespacePair,
    can_use_namespaces,
    enter_namespace,
    netns_exec,
)
from sdr.simulator.link_model import LinkDirection, LinkSpec, Verdict

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
