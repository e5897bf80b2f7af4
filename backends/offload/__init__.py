"""Offload backend: per-packet receive work in worker processes over shared memory."""

from backends.offload.pool import WorkerPool
from backends.offload.qp import OffloadQP
from backends.offload.transport import OffloadTransport

__all__ = ["OffloadQP", "OffloadTransport", "WorkerPool"]
