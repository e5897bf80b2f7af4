"""A UDP QP's transport info: the fields :meth:`UdpQP.info` publishes, and the peer's info
validated into the record :meth:`UdpQP.connect` keeps.

Every field is checked before anything is kept (ProtocolError or ConfigError naming it),
so a refused connect changes nothing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sdr.backends.udp.contracts import QPN_MAX, QPN_MIN, QPHost
from sdr.config import QPAttr
from sdr.errors import RemoteProtocolError
from sdr.peer_info import (
    check_int_grid,
    check_int_list,
    check_keys,
    check_list,
    check_port,
    field_host,
    field_int,
    field_port,
    require_object,
)

__all__ = ["INFO_FIELDS", "OPTIONAL_INFO_FIELDS", "PeerInfo", "info_of", "parse_peer_info"]

INFO_FIELDS = ("host", "port", "control_port", "control_id", "qpns", "rkeys")
"""The fields of a UDP QP's transport info (:meth:`UdpQP.info`)."""
OPTIONAL_INFO_FIELDS = ("ports",)
"""Fields a UDP QP's info may carry: ``ports``, the peer's data ports, one per path
(``UdpTransport(paths=...)``; absent: the one ``port``)."""
_MAX_PORTS = 64
_U32 = (1 << 32) - 1


class PeerInfo(NamedTuple):
    """A peer's transport info once every field passed its check."""

    host: str
    """The peer's own IPv4 address (the ICRC and the source check need it, not a name)."""
    port: int
    control: tuple[str, int]
    """Where the peer's control datagrams go: (host, control_port)."""
    control_id: int
    qpns: list[list[int]]
    """The peer's QPNs, [generation][channel]."""
    rkeys: list[int]
    """The peer's rkeys, one per generation."""
    ports: list[int]
    """The peer's data ports, one per path, starting with ``port``."""


def info_of(
    transport: QPHost[Any], control_id: int, qpns: list[list[int]], rkeys: list[int]
) -> dict[str, Any]:
    """The info a QP of ``transport`` publishes (``ports`` only with more than one path)."""
    t = transport
    return {
        "host": t.host,
        "port": t.port,
        "control_port": t.control_port,
        "control_id": control_id,
        "qpns": qpns,
        "rkeys": rkeys,
    } | ({"ports": list(t.ports)} if len(t.ports) > 1 else {})


def parse_peer_info(remote: dict[str, Any], attr: QPAttr) -> PeerInfo:
    """Validate the peer's :meth:`UdpQP.info` for a QP of ``attr``, field by field."""
    path = "transport"
    info = require_object(remote, path)
    check_keys(info, path, INFO_FIELDS, OPTIONAL_INFO_FIELDS)
    # the ICRC and the source check need the peer's own IPv4 address, not a name
    host = field_host(info, "host", path=path, ipv4_only=True)
    port = field_port(info, "port", path=path)
    control = (host, field_port(info, "control_port", path=path))
    control_id = field_int(info, "control_id", 0, _U32, path=path)
    qpns = check_int_grid(
        info["qpns"], f"{path}.qpns", attr.generations, attr.channels, QPN_MIN, QPN_MAX, True
    )
    rkeys = check_int_list(info["rkeys"], f"{path}.rkeys", attr.generations, 0, _U32)
    ports = _peer_ports(info, port, path)
    return PeerInfo(host, port, control, control_id, qpns, rkeys, ports)


def _peer_ports(info: dict[str, Any], port: int, path: str) -> list[int]:
    """The peer's data ports from its info: ``ports`` if given (starting with ``port``)."""
    if "ports" not in info:
        return [port]
    items = check_list(info["ports"], f"{path}.ports", max_length=_MAX_PORTS)
    ports = [check_port(v, f"{path}.ports[{i}]") for i, v in enumerate(items)]
    if not ports or ports[0] != port or len(set(ports)) != len(ports):
        raise RemoteProtocolError(
            f"{path}.ports must list distinct ports starting with port {port}, got {ports}"
        )
    return ports
