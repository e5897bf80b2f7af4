"""SDR: software-defined reliability for RDMA-style transfers.

The core modules do no I/O and read no clock; backends (drivers, ``sdr.backends``) do,
and the runtime (``sdr.runtime``: Context, QPs, handles) joins the two. Start with
:class:`Context`; see docs/api.md.
"""

from sdr.backend_registry import available_backends, load_backend, register_backend
from sdr.chunk_bitmap import ReceiveBitmap, bitmap_chunk_expand
from sdr.config import QPAttr
from sdr.counters import QPCounters
from sdr.errors import (
    BackendNotFound,
    ConfigError,
    LocalProtocolError,
    MessageFailed,
    ProtocolError,
    RemoteProtocolError,
    ResourceBusy,
    SDRError,
    TimeoutError,
    TransportError,
)
from sdr.immediate import ImmediateLayout
from sdr.queue_pair import QueuePairCore
from sdr.runtime import (
    QP,
    Context,
    ReceiveHandle,
    RecvHandle,
    ReliableQP,
    SendHandle,
    SendStream,
    WriteHandle,
    wait_all,
)
from sdr.transport import CompletionBatch, MemoryRegion, Transport, TransportQP, WriteBatch

__version__ = "0.1.0"

__all__ = [
    "QP",
    "BackendNotFound",
    "CompletionBatch",
    "ConfigError",
    "LocalProtocolError",
    "Context",
    "ImmediateLayout",
    "MemoryRegion",
    "MessageFailed",
    "ProtocolError",
    "RemoteProtocolError",
    "QPAttr",
    "QPCounters",
    "QueuePairCore",
    "ReceiveBitmap",
    "ReceiveHandle",
    "RecvHandle",
    "ReliableQP",
    "ResourceBusy",
    "SDRError",
    "SendHandle",
    "SendStream",
    "TimeoutError",
    "Transport",
    "TransportError",
    "TransportQP",
    "WriteBatch",
    "WriteHandle",
    "available_backends",
    "bitmap_chunk_expand",
    "load_backend",
    "register_backend",
    "wait_all",
]
