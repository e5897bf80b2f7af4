"""The UC queue-pair state sequence as data: RESET -> INIT -> RTR -> RTS (+ rate limit).

Each step names the ``ibv_qp_attr_mask`` bits the kernel requires for a UC QP and the
``QPAttr`` fields it reads; :func:`qp_attr_for` fills a real ``pyverbs.qp.QPAttr`` from
the local and remote endpoint info. The transport walks :data:`UC_STEPS` with
``qp.modify(attr, mask)``, so what the unit tests check is what runs on a NIC. UC needs
no RC timers (timeout, retry counts, RNR, read/atomic depths): they are deliberately absent.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from sdr.errors import ConfigError, RemoteProtocolError
from sdr.peer_info import check_int, check_list, check_str

__all__ = [
    "Endpoint",
    "RATE_LIMIT_STEP",
    "Step",
    "UC_STEPS",
    "check_port_mtu",
    "endpoint_from_info",
    "gid_text",
    "path_mtu",
    "qp_attr_for",
    "step_mask",
]

IB_MTUS = {256: "IBV_MTU_256", 512: "IBV_MTU_512", 1024: "IBV_MTU_1024",
           2048: "IBV_MTU_2048", 4096: "IBV_MTU_4096"}  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One ``ibv_modify_qp`` call: target state, mask bit names, fields it reads."""

    state: str
    mask: tuple[str, ...]
    fields: tuple[str, ...]


UC_STEPS: tuple[Step, ...] = (
    Step(
        "IBV_QPS_INIT",
        ("IBV_QP_STATE", "IBV_QP_PKEY_INDEX", "IBV_QP_PORT", "IBV_QP_ACCESS_FLAGS"),
        ("pkey_index", "port_num", "qp_access_flags"),
    ),
    Step(
        "IBV_QPS_RTR",
        ("IBV_QP_STATE", "IBV_QP_AV", "IBV_QP_PATH_MTU", "IBV_QP_DEST_QPN", "IBV_QP_RQ_PSN"),
        ("ah_attr", "path_mtu", "dest_qp_num", "rq_psn"),
    ),
    Step("IBV_QPS_RTS", ("IBV_QP_STATE", "IBV_QP_SQ_PSN"), ("sq_psn",)),
)
"""RESET to RTS for a UC QP (the same masks as rdma-core's pyverbs uses for UC)."""

RATE_LIMIT_STEP = Step("IBV_QPS_RTS", ("IBV_QP_RATE_LIMIT",), ("rate_limit",))
"""RTS to RTS with a hardware rate limit in kbit/s (packet pacing, where supported)."""


@dataclass(frozen=True)
class Endpoint:
    """What a peer needs to address one transport QP."""

    qpn: int
    psn: int  # the first PSN this QP sends (its peer's rq_psn)
    lid: int
    gid: str  # 8 groups of 4 hex digits, as pyverbs prints and parses GIDs


def gid_text(value: str) -> str:
    """A GID in pyverbs' 'xxxx:xxxx:...' form from any IPv6 spelling."""
    try:
        return ipaddress.IPv6Address(value).exploded
    except ValueError as exc:
        raise ConfigError(f"GID {value!r} is not an IPv6-style address") from exc


def path_mtu(mtu: int, enums: Any) -> int:
    """The smallest IB path MTU that carries an SDR packet of ``mtu`` bytes in one packet."""
    for size, name in sorted(IB_MTUS.items()):
        if mtu <= size:
            return int(getattr(enums, name))
    raise ConfigError(
        f"mtu {mtu} exceeds the largest RDMA path MTU (4096): each SDR packet must be one "
        "UC packet, so use mtu <= 4096 with the verbs backend"
    )


def check_port_mtu(mtu: int, active_mtu: int, enums: Any) -> int:
    """The path MTU for ``mtu``; ConfigError when the port's active MTU is smaller.

    A write larger than the path MTU becomes a multi-packet UC message, which the responder
    drops whole on any loss: exactly what one-packet-per-write SDR avoids.
    """
    wanted = path_mtu(mtu, enums)
    if wanted > active_mtu:
        sizes = {int(getattr(enums, name)): size for size, name in IB_MTUS.items()}
        raise ConfigError(
            f"mtu {mtu} needs path MTU {sizes.get(wanted)} but the port's active MTU is "
            f"{sizes.get(active_mtu, active_mtu)}; lower QPAttr.mtu (or raise the link MTU)"
        )
    return wanted


def step_mask(step: Step, enums: Any) -> int:
    """The ``ibv_qp_attr_mask`` value of a step."""
    value = 0
    for name in step.mask:
        value |= int(getattr(enums, name))
    return value


def qp_attr_for(
    pv: Any,
    step: Step,
    *,
    port: int,
    sgid_index: int,
    mtu: int,
    local: Endpoint,
    remote: Endpoint | None = None,
    rate_kbps: int = 0,
) -> Any:
    """A ``pyverbs.qp.QPAttr`` holding exactly what ``step`` reads."""
    e = pv.enums
    attr = pv.qp.QPAttr(port_num=port)
    attr.qp_state = int(getattr(e, step.state))
    for field in step.fields:
        if field == "pkey_index":
            attr.pkey_index = 0
        elif field == "port_num":
            attr.port_num = port
        elif field == "qp_access_flags":
            attr.qp_access_flags = int(e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        elif field == "path_mtu":
            attr.path_mtu = path_mtu(mtu, e)
        elif field == "rate_limit":
            attr.rate_limit = rate_kbps
        elif field == "sq_psn":
            attr.sq_psn = local.psn
        else:
            if remote is None:
                raise ConfigError(f"step {step.state} needs the remote endpoint")
            if field == "dest_qp_num":
                attr.dest_qp_num = remote.qpn
            elif field == "rq_psn":
                attr.rq_psn = remote.psn
            elif field == "ah_attr":
                route = pv.addr.GlobalRoute(dgid=pv.addr.GID(remote.gid), sgid_index=sgid_index)
                attr.ah_attr = pv.addr.AHAttr(port_num=port, is_global=1, gr=route, dlid=remote.lid)
    return attr


def endpoint_from_info(value: object, path: str) -> Endpoint:
    """One peer endpoint ``[qpn, psn, lid, gid]`` of verbs peer info, validated."""
    entry = check_list(value, path)
    if len(entry) != 4:
        raise RemoteProtocolError(f"{path} must be [qpn, psn, lid, gid], got {len(entry)} items")
    qpn = check_int(entry[0], f"{path}[0] (qpn)", 2, (1 << 24) - 1)
    psn = check_int(entry[1], f"{path}[1] (psn)", 0, (1 << 24) - 1)
    lid = check_int(entry[2], f"{path}[2] (lid)", 0, 0xFFFF)
    try:
        gid = gid_text(check_str(entry[3], f"{path}[3] (gid)", 64))
    except ConfigError as exc:
        raise RemoteProtocolError(f"{path}[3] (gid): {exc}") from exc
    return Endpoint(qpn, psn, lid, gid)
