"""SDR: software-defined reliability for RDMA-style transfers.

The core (this package) does no I/O and reads no clock; backends (drivers) do. Start with
:class:`Context`; see docs/api.md.
"""

from sdr.api import QP, Context, RecvHandle, SendHandle, SendStream
from sdr.backend_registry import available_backends, load_backend
from sdr.chunk_bitmap import ReceiveBitmap, bitmap_chunk_expand
from sdr.config import QPAttr
from sdr.counters import QPCounters
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
from sdr.immediate import ImmediateLayout
from sdr.queue_pair import QueuePairCore
from sdr.transport import CompletionBatch, MemoryRegion, Transport, TransportQP, WriteBatch

__version__ = "0.1.0"

__all__ = [
    "QP",
    "BackendNotFound",
    "CompletionBatch",
    "ConfigError",
    "Context",
    "ImmediateLayout",
    "MemoryRegion",
    "MessageFailed",
    "ProtocolError",
    "QPAttr",
    "QPCounters",
    "QueuePairCore",
    "ReceiveBitmap",
    "RecvHandle",
    "ResourceBusy",
    "SDRError",
    "SendHandle",
    "SendStream",
    "TimeoutError",
    "Transport",
    "TransportError",
    "TransportQP",
    "WriteBatch",
    "available_backends",
    "bitmap_chunk_expand",
    "load_backend",
]
