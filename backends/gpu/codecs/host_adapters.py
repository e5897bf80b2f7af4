"""Host adapters ``mds-gpu`` and ``xor-gpu``: :class:`sdr.codecs.Codec` on host buffers,
computed on the GPU.

They copy the chunks to the GPU, run :class:`~sdr.backends.gpu.codecs.device.GpuRSCodec` /
:class:`~sdr.backends.gpu.codecs.device.GpuXORCodec` and copy the result back, so they give
the same bytes as ``mds`` / ``xor``; they exist for testing and for hosts whose CPU is the
bottleneck. Importing this module needs neither CuPy nor a GPU; constructing a codec does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdr.backends.gpu.codecs.device import GpuRSCodec, GpuXORCodec
from sdr.codecs.base import Codec, Present
from sdr.codecs.xor import XORCodec

__all__ = ["GpuMDSHostCodec", "GpuXORHostCodec"]


class _HostAdapter:
    """Codec hooks on host buffers: pad to a full submessage, run on the GPU, copy back."""

    gpu: GpuRSCodec | GpuXORCodec

    def _encode(self, data: list[np.ndarray], parity: list[np.ndarray], whole: Any) -> None:
        host = self._stack(data, 0)
        out = self.gpu.encode(self.gpu._cp.asarray(host)).get()[0]
        for j, p in enumerate(parity):
            p[:] = out[j]

    def _decode(
        self, data: list[np.ndarray], parity: list[np.ndarray | None], missing: list[int]
    ) -> None:
        k, m = self.gpu.k, self.gpu.m
        host = self._stack(data, m)
        present = [True] * (k + m)
        for i in missing:
            present[i] = False
        for j, p in enumerate(parity):
            if p is None:
                present[k + j] = False
            else:
                host[k + j] = p
        dev = self.gpu._cp.asarray(host)
        self.gpu.decode(dev, present)
        rebuilt = dev.get()
        for i in missing:
            data[i][:] = rebuilt[i, : data[i].size]

    def _stack(self, data: list[np.ndarray], extra: int) -> np.ndarray:
        gpu = self.gpu
        host = np.zeros((gpu.k + extra, gpu.chunk_size), dtype=np.uint8)
        for i, c in enumerate(data):
            host[i, : c.size] = c
        return host


class GpuMDSHostCodec(_HostAdapter, Codec):
    """``mds-gpu``: the ``mds`` codec's bytes, computed on the GPU (host buffers)."""

    name = "mds-gpu"

    def __init__(self, k: int, m: int, chunk_size: int) -> None:
        Codec.__init__(self, k, m, chunk_size)
        self.gpu = GpuRSCodec(k, m, chunk_size)

    def can_recover(self, present: Present) -> bool:
        """True when at most ``m`` chunks are missing."""
        return sum(1 for p in present if not p) <= self.m

    def _tolerance(self) -> str:
        return f"Reed-Solomon recovers any {self.m} losses"


class GpuXORHostCodec(_HostAdapter, XORCodec):
    """``xor-gpu``: the ``xor`` codec's bytes, computed on the GPU (host buffers)."""

    name = "xor-gpu"

    def __init__(self, k: int, m: int, chunk_size: int) -> None:
        XORCodec.__init__(self, k, m, chunk_size)
        self.gpu = GpuXORCodec(k, m, chunk_size)
