"""Registering tensors: CPU tensors zero-copy through DLPack, GPU tensors through pinned staging.

``ctx.register(obj)`` accepts, besides buffer-protocol objects:

* a CPU tensor exposing ``__dlpack__`` (torch, JAX, CuPy host arrays...): its memory is
  viewed through :func:`numpy.from_dlpack` and registered in place, no copy;
* a GPU array (``__cuda_array_interface__``, or ``__dlpack__`` on a CUDA device: CuPy
  arrays, torch CUDA tensors). Without a GPUDirect path (no RDMA NIC here, and the UDP
  backend reads memory with the CPU) the region is a **pinned host staging buffer** of
  the same size. :class:`sdr.ReliableQP` moves the bytes for you: ``write``
  copies the written range device -> pinned host before the first packet leaves, and a
  completed receive copies its range pinned host -> device before the handle reports
  completion. Users see no copy, but it is there (PCIe/C2C bandwidth, tens of GB/s).
  The plain SDR QP API does not stage: call :func:`to_host` / :func:`to_device` around
  ``send``/``recv`` yourself.

The core stays importable without CUDA: CuPy is imported only for a GPU object.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdr.errors import ConfigError

__all__ = [
    "StagingBuffer",
    "dlpack_byte_view",
    "device_stage",
    "is_device_array",
    "to_device",
    "to_host",
]

_CPU_DEVICES = {1, 3}  # kDLCPU, kDLCUDAHost (pinned host memory is CPU-addressable)
_CUDA_DEVICES = {2, 13}  # kDLCUDA, kDLCUDAManaged


def is_device_array(obj: object) -> bool:
    """True for an array that lives in GPU memory (CUDA array interface or DLPack device)."""
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        kind = int(device()[0])
    except Exception:  # noqa: BLE001 - a broken producer is "not a device array"
        return False
    return kind in _CUDA_DEVICES


class StagingBuffer(np.ndarray):
    """Pinned host bytes standing in for a GPU buffer (``gpu``: a CuPy uint8 view of it).

    The copy methods are not named ``to_host``/``to_device``: ``ndarray.to_device`` is
    numpy's array-API method (move to a device, returning an array), which they would shadow.
    """

    gpu: Any

    def copy_from_device(self, start: int = 0, stop: int | None = None) -> None:
        """Copy device bytes [start, stop) into this buffer (synchronous)."""
        stop = len(self) if stop is None else stop
        if stop > start:
            self.gpu[start:stop].get(out=np.asarray(self)[start:stop])

    def copy_to_device(self, start: int = 0, stop: int | None = None) -> None:
        """Copy bytes [start, stop) of this buffer to the device (synchronous)."""
        stop = len(self) if stop is None else stop
        if stop > start:
            self.gpu[start:stop].set(np.asarray(self)[start:stop])
            self.gpu[start:stop].device.synchronize()


def _staging(obj: object) -> StagingBuffer:
    try:
        import cupy  # noqa: PLC0415 - optional dependency, only for GPU arrays
    except ImportError as exc:
        raise ConfigError(
            f"cannot register a GPU {type(obj).__name__}: staging it needs CuPy "
            "(pip install sdr-rdma[gpu])"
        ) from exc
    arr = cupy.asarray(obj) if hasattr(obj, "__cuda_array_interface__") else cupy.from_dlpack(obj)
    if not arr.flags.c_contiguous:
        raise ConfigError(f"cannot register a non-contiguous GPU {type(obj).__name__}")
    device = arr.reshape(-1).view(cupy.uint8)
    pinned = cupy.cuda.alloc_pinned_memory(max(device.size, 1))
    host = np.frombuffer(pinned, dtype=np.uint8, count=device.size)
    stage = host.view(StagingBuffer)
    stage.gpu = device
    stage.copy_from_device()  # the region starts with the tensor's bytes
    return stage


def dlpack_byte_view(obj: object) -> memoryview | None:
    """A writable flat byte view for a DLPack/CUDA object, or None if it is neither.

    CPU tensors are viewed in place; GPU arrays get a pinned :class:`StagingBuffer`.
    """
    if is_device_array(obj):
        return _staging(obj).data.cast("B")
    if not hasattr(obj, "__dlpack__"):
        return None
    try:
        arr = np.from_dlpack(obj)
    except (TypeError, ValueError, BufferError, RuntimeError) as exc:
        raise ConfigError(f"cannot view {type(obj).__name__} through DLPack: {exc}") from exc
    if not arr.flags.c_contiguous:
        raise ConfigError(f"cannot register a non-contiguous {type(obj).__name__}")
    if not arr.flags.writeable:
        raise ConfigError(f"cannot register a read-only {type(obj).__name__}")
    return arr.reshape(-1).view(np.uint8).data


def device_stage(region: Any) -> StagingBuffer | None:
    """The staging buffer behind a registered region (None for host memory)."""
    owner = getattr(getattr(region, "view", None), "obj", None)
    return owner if isinstance(owner, StagingBuffer) else None


def to_host(region: Any, offset: int = 0, length: int | None = None) -> None:
    """Refresh the staged bytes [offset, offset+length) of ``region`` from the GPU (no-op
    for host memory). Call before sending a GPU region with the plain QP API."""
    stage = device_stage(region)
    if stage is not None:
        stage.copy_from_device(offset, len(stage) if length is None else offset + length)


def to_device(region: Any, offset: int = 0, length: int | None = None) -> None:
    """Copy received staged bytes [offset, offset+length) of ``region`` back to the GPU
    (no-op for host memory). Call after a plain QP receive completes."""
    stage = device_stage(region)
    if stage is not None:
        stage.copy_to_device(offset, len(stage) if length is None else offset + length)
