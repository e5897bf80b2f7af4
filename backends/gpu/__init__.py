"""GPU collective backend: CuPy, CUDA IPC between processes, a CUDA C plan executor; and
the GPU erasure codecs (:mod:`sdr.backends.gpu.codecs`).

Importing this package needs no GPU and no CuPy; :func:`cuda_available` says whether the
backend can run here. The communicator is imported on first use.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def cuda_available(min_devices: int = 1) -> bool:
    """True if CuPy imports and sees at least ``min_devices`` CUDA devices."""
    try:
        import cupy  # noqa: PLC0415 - optional dependency

        return int(cupy.cuda.runtime.getDeviceCount()) >= min_devices
    except Exception as exc:  # noqa: BLE001 - no CuPy, no driver, no device: all mean "no"
        log.debug("CUDA unavailable: %s", exc)
        return False


def __getattr__(name: str) -> Any:
    if name == "GpuCommunicator":
        from sdr.backends.gpu.communicator import GpuCommunicator  # noqa: PLC0415

        return GpuCommunicator
    raise AttributeError(name)


__all__ = ["GpuCommunicator", "cuda_available"]
