"""Work requests and completions of the verbs data path, and the immediate's byte order.

One SDR packet is one ``IBV_WR_RDMA_WRITE_WITH_IMM`` with one SGE (pyverbs refuses a WR
without one, so an immediate-only packet carries a zero-length SGE). The 32-bit immediate
travels in network byte order, as in rdma-core's own tests: ``htonl`` when posting,
``ntohl`` when reading ``wc.imm_data``. Receive WQEs carry one tiny scratch SGE: a write
with immediate consumes a receive WQE but never writes through it.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = [
    "completion_kind",
    "imm_from_wire",
    "imm_to_wire",
    "recv_wr",
    "write_with_imm",
]


def imm_to_wire(imm: int) -> int:
    """The immediate as ``SendWR.imm_data`` wants it (big-endian on the wire)."""
    return socket.htonl(imm & 0xFFFFFFFF)


def imm_from_wire(imm_data: int) -> int:
    """The SDR immediate from ``WC.imm_data``."""
    return socket.ntohl(imm_data & 0xFFFFFFFF)


def write_with_imm(
    pv: Any,
    *,
    wr_id: int,
    addr: int,
    length: int,
    lkey: int,
    remote_addr: int,
    rkey: int,
    imm: int,
    signaled: bool,
) -> Any:
    """One RDMA WRITE with immediate of ``length`` bytes from ``addr`` (lkey)."""
    e = pv.enums
    sge = pv.wr.SGE(addr, length, lkey)
    flags = int(e.IBV_SEND_SIGNALED) if signaled else 0
    wr = pv.wr.SendWR(
        wr_id=wr_id,
        opcode=int(e.IBV_WR_RDMA_WRITE_WITH_IMM),
        num_sge=1,
        sg=[sge],
        send_flags=flags,
    )
    wr.imm_data = imm_to_wire(imm)
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def recv_wr(pv: Any, wr_id: int, scratch_addr: int, scratch_lkey: int) -> Any:
    """A receive WQE for one incoming write with immediate."""
    return pv.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[pv.wr.SGE(scratch_addr, 1, scratch_lkey)])


def completion_kind(pv: Any, wc: Any) -> str:
    """'data' (a placed write with immediate), 'send', or 'error:<status>'."""
    e = pv.enums
    if wc.status != e.IBV_WC_SUCCESS:
        return f"error:{wc.status}"
    if wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM and wc.wc_flags & e.IBV_WC_WITH_IMM:
        return "data"
    return "send"
