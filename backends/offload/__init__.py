"""Offload backend: per-packet receive work in worker processes over shared memory."""

from sdr.backends.offload.pool import WorkerPool
from sdr.backends.offload.qp import OffloadQP
from sdr.backends.offload.transport import OffloadTransport

__all__ = ["OffloadQP", "OffloadTransport", "WorkerPool"]
