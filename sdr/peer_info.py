"""Validation of a peer's QP info: what ``qp.connect(peer_info)`` receives from the network.

Peer info comes from the other end of a connection, out of band: it is input from the
network like any packet. Every field is checked here before the core or a transport uses
it, so altered or damaged info fails at ``connect()`` and never later inside
``progress()``. Two kinds of error, each naming the field (``transport.qpns[1][0]``),
the value and what was expected:

- :class:`~sdr.errors.ProtocolError`: the info is malformed: a field is missing or
  unknown, has the wrong type or lies outside its range (a 24-bit QPN of 2^70, a port
  of 70000, a host that is not an address);
- :class:`~sdr.errors.ConfigError`: a well-formed value that does not fit this QP (the
  peer has another number of generations or channels, another backend or wire).

Pure Python and no I/O: host names are checked for syntax only, never resolved (no DNS).
Transports call these helpers from their ``connect()``; :meth:`sdr.QP.connect` checks the
core's part (version, backend, attributes) the same way.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sdr.errors import ConfigError, RemoteProtocolError

__all__ = [
    "MAX_LIST",
    "check_address",
    "check_host",
    "check_int",
    "check_int_grid",
    "check_int_list",
    "check_keys",
    "check_list",
    "check_port",
    "check_str",
    "field",
    "field_address",
    "field_host",
    "field_int",
    "field_port",
    "field_str",
    "require_object",
    "show",
]

MAX_LIST = 4096
"""Longest list accepted in peer info (QPNs are generations x channels <= 16 x 256)."""
_MAX_STR = 255
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")


def show(value: object) -> str:
    """A short repr of a bad value for an error message (long numbers and texts cut)."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
        if len(text) > 24:
            return f"{text[:12]}... ({len(text.lstrip('-'))} digits)"
        return text
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def require_object(value: object, path: str) -> dict[str, Any]:
    """``value`` as a JSON object (dict with string keys); ProtocolError otherwise."""
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"{path} must be a JSON object, got {_kind(value)} {show(value)}")
    return value


def check_keys(
    obj: Mapping[str, Any], path: str, required: Iterable[str], optional: Iterable[str] = ()
) -> None:
    """Every required field present and no field beyond required + optional."""
    required, optional = set(required), set(optional)
    missing = required - obj.keys()
    if missing:
        raise RemoteProtocolError(
            f"{path} lacks field(s) {sorted(missing)}; expected {sorted(required)}"
        )
    unknown = [k for k in obj if k not in required and k not in optional]
    if unknown:
        names = ", ".join(show(k) for k in unknown[:5])
        raise RemoteProtocolError(
            f"{path} has unknown field(s) {names}; expected only {sorted(required | optional)}"
        )


def field(obj: Mapping[str, Any], name: str, path: str = "peer info") -> Any:
    """The value of a required field (ProtocolError naming it when it is missing)."""
    if not isinstance(obj, Mapping):
        raise RemoteProtocolError(f"{path} must be a JSON object, got {_kind(obj)} {show(obj)}")
    if name not in obj:
        raise RemoteProtocolError(f"{path} lacks the field {name!r}")
    return obj[name]


def check_int(value: object, path: str, lo: int, hi: int) -> int:
    """An integer (not a bool, not a float) in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RemoteProtocolError(
            f"{path} must be an integer in [{lo}, {hi}], got {_kind(value)} {show(value)}"
        )
    return value


def field_int(
    info: Mapping[str, Any], name: str, lo: int, hi: int, *, path: str = "peer info"
) -> int:
    """Field ``name`` of ``info`` as an integer in [lo, hi]."""
    return check_int(field(info, name, path), f"{path}.{name}", lo, hi)


def check_str(value: object, path: str, max_len: int = _MAX_STR) -> str:
    """A string of at most ``max_len`` characters."""
    if not isinstance(value, str) or len(value) > max_len:
        raise RemoteProtocolError(
            f"{path} must be a string of at most {max_len} characters, "
            f"got {_kind(value)} {show(value)}"
        )
    return value


def field_str(
    info: Mapping[str, Any], name: str, *, path: str = "peer info", max_len: int = _MAX_STR
) -> str:
    """Field ``name`` of ``info`` as a string."""
    return check_str(field(info, name, path), f"{path}.{name}", max_len)


def _hostname_ok(text: str) -> bool:
    name = text[:-1] if text.endswith(".") else text
    if not name or len(name) > 253:
        return False
    labels = name.split(".")
    return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()


def check_host(
    value: object,
    path: str,
    *,
    ipv4_only: bool = False,
    names: bool = False,
    unicast: bool = True,
) -> str:
    """A host: an IP address literal (canonical form returned), or with ``names`` a
    syntactically valid host name (RFC 1123; never resolved here).

    ipv4_only: only IPv4 literals (transports whose sockets are AF_INET).
    unicast: refuse the unspecified (0.0.0.0, ::), multicast and broadcast addresses,
        which cannot be a peer's own address.
    """
    expected = "an IPv4 address" if ipv4_only else "an IP address"
    if names:
        expected += " or a host name"
    if not isinstance(value, str) or not value or len(value) > 253:
        raise RemoteProtocolError(f"{path} must be {expected}, got {_kind(value)} {show(value)}")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if names and not ipv4_only and _hostname_ok(value):
            return value
        raise RemoteProtocolError(f"{path} must be {expected}, got {show(value)}") from None
    if ipv4_only and address.version != 4:
        raise RemoteProtocolError(f"{path} must be {expected}, got the IPv6 address {show(value)}")
    if unicast:
        broadcast = address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255")
        if address.is_unspecified or address.is_multicast or broadcast:
            raise RemoteProtocolError(
                f"{path} must be a unicast address of the peer, got {show(value)} "
                "(unspecified, multicast or broadcast)"
            )
    return str(address)


def field_host(
    info: Mapping[str, Any],
    name: str,
    *,
    path: str = "peer info",
    ipv4_only: bool = False,
    names: bool = False,
    unicast: bool = True,
) -> str:
    """Field ``name`` of ``info`` as a host (see :func:`check_host`)."""
    return check_host(
        field(info, name, path),
        f"{path}.{name}",
        ipv4_only=ipv4_only,
        names=names,
        unicast=unicast,
    )


def check_port(value: object, path: str) -> int:
    """A UDP/TCP port a datagram can be sent to: an integer in [1, 65535]."""
    return check_int(value, path, 1, 65535)


def field_port(info: Mapping[str, Any], name: str, *, path: str = "peer info") -> int:
    """Field ``name`` of ``info`` as a port in [1, 65535]."""
    return check_port(field(info, name, path), f"{path}.{name}")


def check_list(
    value: object, path: str, length: int | None = None, max_length: int = MAX_LIST
) -> list[Any]:
    """A JSON array; with ``length`` it must have exactly that many items (ConfigError
    otherwise: the peer's QP is shaped differently from this one)."""
    if not isinstance(value, list):
        raise RemoteProtocolError(f"{path} must be a JSON array, got {_kind(value)} {show(value)}")
    if length is not None and len(value) != length:
        raise ConfigError(f"{path} has {len(value)} entries, this QP expects {length}")
    if len(value) > max_length:
        raise RemoteProtocolError(f"{path} has {len(value)} entries, at most {max_length} allowed")
    return value


def check_address(value: object, path: str, **host: bool) -> tuple[str, int]:
    """A ``[host, port]`` pair (host options as in :func:`check_host`)."""
    pair = value if isinstance(value, (list, tuple)) else None
    if pair is None or len(pair) != 2:
        raise RemoteProtocolError(
            f"{path} must be a [host, port] pair, got {_kind(value)} {show(value)}"
        )
    return check_host(pair[0], f"{path}[0]", **host), check_port(pair[1], f"{path}[1]")


def field_address(
    info: Mapping[str, Any], name: str, *, path: str = "peer info", **host: bool
) -> tuple[str, int]:
    """Field ``name`` of ``info`` as a ``[host, port]`` pair."""
    return check_address(field(info, name, path), f"{path}.{name}", **host)


def check_int_list(value: object, path: str, length: int, lo: int, hi: int) -> list[int]:
    """An array of exactly ``length`` integers in [lo, hi]."""
    items = check_list(value, path, length)
    return [check_int(v, f"{path}[{i}]", lo, hi) for i, v in enumerate(items)]


def check_int_grid(
    value: object, path: str, rows: int, cols: int, lo: int, hi: int, distinct: bool = False
) -> list[list[int]]:
    """A ``rows x cols`` array of arrays of integers in [lo, hi] (all different with
    ``distinct``: e.g. QPNs, each of which names one endpoint)."""
    grid = [
        check_int_list(row, f"{path}[{r}]", cols, lo, hi)
        for r, row in enumerate(check_list(value, path, rows))
    ]
    if distinct:
        seen: set[int] = set()
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                if v in seen:
                    raise RemoteProtocolError(f"{path}[{r}][{c}] repeats the value {v}")
                seen.add(v)
    return grid
