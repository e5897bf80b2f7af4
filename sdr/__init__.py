"""SDR: software-defined reliability for RDMA-style transfers (the core, no I/O)."""

from sdr.errors import (
    BackendNotFound,
    ConfigError,
    MessageFailed,
    ProtocolError,
    ResourceBusy,
    SDRError,
    TimeoutError,
    TransportError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendNotFound",
    "ConfigError",
    "MessageFailed",
    "ProtocolError",
    "ResourceBusy",
    "SDRError",
    "TimeoutError",
    "TransportError",
]
