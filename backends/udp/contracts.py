"""What the udp backend's modules need of one another, and the constants they share.

The transport owns QPs and the receive path; a QP calls back into its transport, and the
receive path fills QPs' completion queues. Each side is typed here by what it uses (a
Protocol), so ``qp``, ``receive`` and ``transport`` import this module, never each other
in a circle: ``transport`` imports ``qp`` and ``receive``, and nothing imports
``transport`` but the package and the tools above it.
"""

from __future__ import annotations

import socket
import struct
from typing import Protocol, TypeVar

import numpy as np

from sdr.key_table import KeyTable
from sdr.transport import CompletionBatch

__all__ = ["CONTROL_HEADER", "QPN_MAX", "QPN_MIN", "QPHost", "ReceivingQP"]

CONTROL_HEADER = struct.Struct("!I")
"""Control datagrams start with the destination QP's 32-bit control id."""
QPN_MIN, QPN_MAX = 2, (1 << 24) - 1
"""QPNs are 24 bits; 0 and 1 are reserved in InfiniBand."""


class ReceivingQP(Protocol):
    """What the receive path uses of a QP (:class:`sdr.backends.udp.qp.UdpQP`)."""

    keys: KeyTable
    rkeys: list[int]
    peer: tuple[str, int] | None
    discards: dict[str, int]
    """Packets dropped before placement, by reason: the receive path counts into it."""

    def deliver(self, batch: CompletionBatch) -> None:
        """Take the completions of packets the receive path placed for this QP."""


QP_contra = TypeVar("QP_contra", contravariant=True)
"""The QP class a host takes back in its calls (``QPHost[UdpQP]``): the QP module names it
without this module importing it."""


class QPHost(Protocol[QP_contra]):
    """What a QP uses of its transport (:class:`sdr.backends.udp.transport.UdpTransport`)."""

    rng: np.random.Generator
    host: str
    port: int
    ports: list[int]
    local_ip: int
    gso: bool
    control_port: int
    data_socket: socket.socket
    pump_round: int
    drained: bool
    control_round: int
    control_drained: bool

    def now(self) -> float: ...

    def new_qpn(self, qp: QP_contra, generation: int, channel: int) -> int: ...

    def new_control_id(self, qp: QP_contra) -> int: ...

    def endpoints_changed(self, qp: QP_contra | None = None) -> None: ...

    def forget(self, qp: QP_contra) -> None: ...

    def pump(self, max_packets: int) -> int: ...

    def pump_control(self) -> int: ...

    def send_control(self, address: tuple[str, int], control_id: int, data: bytes) -> None: ...

    def transport_counters(self) -> dict[str, int]: ...
