"""Verbs backend: SDR over real RDMA NICs (RoCE, InfiniBand) through pyverbs.

Importing this package never needs pyverbs; :class:`VerbsTransport` loads it on first use
and raises TransportError("no RDMA device: ...") where there is no device.
"""

from sdr.backends.verbs.transport import VerbsQP, VerbsTransport

__all__ = ["VerbsQP", "VerbsTransport"]
