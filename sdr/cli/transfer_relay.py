"""A file transfer through ``sdr emulate relay`` (no root): the relay's map file.

``sdr emulate relay --a HOST:DATA --a HOST:CONTROL --b HOST:DATA --b HOST:CONTROL --map
FILE`` writes FILE: for each side, the two UDP ports it must bind (data, control) and the
relay's stand-ins for the other side's two ports. ``sdr send --relay FILE`` is side A,
``sdr recv --relay FILE`` side B: each binds its ports and, in the peer's QP info, replaces
the peer's UDP addresses with the stand-ins, so every data and control packet crosses the
emulated link (both ways, as through a NAT). The out-of-band TCP connection stays direct.

With a shared secret the peer's info is verified first and then signed again with the same
secret, since its addresses changed.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass

from sdr.auth import sign_info, verify_info
from sdr.backends.udp import UdpTransport
from sdr.errors import ConfigError, RemoteProtocolError
from sdr.errors import TimeoutError as SDRTimeoutError

__all__ = ["RelaySide", "load_side", "write_map"]

Address = tuple[str, int]

_WAIT_STEP_S = 0.1


@dataclass(frozen=True)
class RelaySide:
    """One side of the relay: its own UDP ports and where it sends for the peer's."""

    data: Address
    control: Address
    peer_data: Address
    peer_control: Address

    def transport(self, prefault: bool = True) -> UdpTransport:
        """A UDP transport bound to this side's data and control ports (``prefault``:
        see :class:`~sdr.backends.udp.UdpTransport`)."""
        if self.data[0] != self.control[0]:
            raise ConfigError(
                f"relay map: data {self.data} and control {self.control} need the same host"
            )
        return UdpTransport(
            host=self.data[0], port=self.data[1], control_port=self.control[1], prefault=prefault
        )

    def rewrite(self, info: str, secret: bytes | None) -> str:
        """The peer's QP ``info`` with its UDP addresses replaced by the relay's stand-ins
        (the stand-ins of one side share a host: ConfigError otherwise)."""
        if self.peer_data[0] != self.peer_control[0]:
            raise ConfigError(
                f"relay map: stand-ins {self.peer_data} and {self.peer_control} differ in host"
            )
        try:
            decoded = json.loads(info)
            body = dict(verify_info(decoded, secret))
            body.pop("nonce", None)
            transport = dict(body["transport"])
        except (TypeError, ValueError, KeyError) as exc:
            raise RemoteProtocolError(f"peer QP info is malformed: {exc}") from exc
        transport.update(
            host=self.peer_data[0], port=self.peer_data[1], control_port=self.peer_control[1]
        )
        body["transport"] = transport
        return json.dumps(sign_info(body, secret))


def write_map(path: str, a: list[Address], b: list[Address], for_a: list[Address],
              for_b: list[Address]) -> None:  # fmt: skip
    """Write the map file that ``--relay`` reads, atomically (a reader sees all or none):
    into a new file of a random name beside ``path`` (created with ``O_EXCL |
    O_NOFOLLOW``: nothing planted there is followed or overwritten), then renamed over
    ``path`` (a link at ``path`` is replaced, never followed)."""
    doc = {
        "a": {"ports": [f"{h}:{p}" for h, p in a], "peer": [f"{h}:{p}" for h, p in for_a]},
        "b": {"ports": [f"{h}:{p}" for h, p in b], "peer": [f"{h}:{p}" for h, p in for_b]},
    }
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise


def _address(text: object, what: str) -> Address:
    host, _, port = str(text).rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"relay map: {what} must be HOST:PORT, got {text!r}")
    return host, int(port)


def load_side(path: str, side: str, timeout: float) -> RelaySide:
    """Side ``"a"`` (sender) or ``"b"`` (receiver) of the map file at ``path``, waiting up
    to ``timeout`` s for the relay to write it (sdr.TimeoutError after)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() >= deadline:
            raise SDRTimeoutError(
                f"--relay {path!r}: no map file within {timeout:g} s "
                "(start 'sdr emulate relay ... --map FILE' first)"
            )
        time.sleep(_WAIT_STEP_S)
    try:
        with open(path) as fh:
            entry = json.load(fh)[side]
        ports, peer = entry["ports"], entry["peer"]
        if len(ports) != 2 or len(peer) != 2:
            raise ValueError("two ports per side expected (data, then control)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"--relay {path!r} is not a relay map with two ports per side "
            f"(sdr emulate relay --a DATA --a CONTROL --b DATA --b CONTROL --map FILE): {exc}"
        ) from exc
    names = ("data port", "control port")
    return RelaySide(
        data=_address(ports[0], f"{side}.{names[0]}"),
        control=_address(ports[1], f"{side}.{names[1]}"),
        peer_data=_address(peer[0], f"{side}.peer {names[0]}"),
        peer_control=_address(peer[1], f"{side}.peer {names[1]}"),
    )
