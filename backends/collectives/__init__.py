"""The collectives' runtime: what the collective drivers (shm, gpu, hierarchical) share.

The core (:mod:`sdr.collectives`) writes and checks plans; this package runs them:

- :mod:`~sdr.backends.collectives.layout`: a plan's chunks lowered to byte offsets for
  one call shape (every executor lowers a plan the same way);
- :mod:`~sdr.backends.collectives.dtypes`: element types, bfloat16 through uint16 storage;
- :mod:`~sdr.backends.collectives.interfaces`: the primitives a collective backend
  implements (bootstrap, semaphore, memory and port channels, communicator);
- :mod:`~sdr.backends.collectives.interpreter`: the one host interpreter of lowered ops
  over those channels (the shm and SDR port-channel executors both run it);
- :mod:`~sdr.backends.collectives.selection`: which algorithm (or NCCL) runs one call.

Pure Python and NumPy: importing it needs no GPU.
"""

from sdr.backends.collectives.interfaces import (
    Bootstrap,
    Communicator,
    MappedChannel,
    MemoryChannel,
    PortChannel,
    Semaphore,
)
from sdr.backends.collectives.interpreter import OpInterpreter
from sdr.backends.collectives.layout import (
    Layout,
    LoweredOp,
    Span,
    lower,
    make_layout,
    packet_bytes,
)
from sdr.backends.collectives.selection import NCCL, select_algorithm

__all__ = [
    "NCCL",
    "Bootstrap",
    "Communicator",
    "Layout",
    "LoweredOp",
    "MappedChannel",
    "MemoryChannel",
    "OpInterpreter",
    "PortChannel",
    "Semaphore",
    "Span",
    "lower",
    "make_layout",
    "packet_bytes",
    "select_algorithm",
]
