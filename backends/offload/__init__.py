"""Offload backend: per-packet receive work in worker processes over shared memory."""

from backends.offload.pool import WorkerPool
from backends.offload.transport import OffloadQP, OffloadTransport

__all__ = ["OffloadQP", "OffloadTransport", "WorkerPool"]
