"""The ``sdr`` process group's settings read from the environment.

The SDR links' options (SDR_SCHEME, SDR_RATE, SDR_RTT, SDR_LOSS, SDR_SIZE_HINT,
SDR_MAX_MESSAGE_SIZE), this rank's address when SDR_HOST does not give one, and the
durations in seconds (SDR_HEARTBEAT_S, SDR_PEER_SILENCE_S). A malformed value is a
one-line :class:`~sdr.errors.ConfigError` naming the variable.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sdr.backends.hierarchical import SdrLinkOptions
from sdr.errors import ConfigError

__all__ = ["default_host", "link_options_from_env", "seconds_from_env"]


def link_options_from_env(timeout: float) -> SdrLinkOptions:
    """SdrLinkOptions from SDR_SCHEME, SDR_RATE, SDR_RTT, SDR_LOSS, SDR_SIZE_HINT and
    SDR_MAX_MESSAGE_SIZE; every wait bounded by the group's ``timeout`` (seconds)."""
    env = os.environ
    fields = {
        "scheme": "SDR_SCHEME",
        "rate": "SDR_RATE",
        "rtt": "SDR_RTT",
        "size_hint": "SDR_SIZE_HINT",
        "max_message_size": "SDR_MAX_MESSAGE_SIZE",
    }
    changes: dict[str, Any] = {k: env[v] for k, v in fields.items() if env.get(v)}
    if env.get("SDR_LOSS"):
        try:
            changes["loss"] = float(env["SDR_LOSS"])
        except ValueError:
            raise ConfigError(f"SDR_LOSS={env['SDR_LOSS']!r}; expected a number") from None
    return SdrLinkOptions(timeout=timeout).replace(**changes)


def default_host() -> str:
    """The local address that routes to MASTER_ADDR (what other datacenters reach)."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(master), 9))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def seconds_from_env(name: str, default: float) -> float:
    """The number of seconds in variable ``name`` (``default`` when unset or empty)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}; expected seconds as a number") from None
