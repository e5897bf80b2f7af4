"""Erasure codes on GPU buffers: Reed-Solomon (bit-identical to the CPU ``mds`` codec) and XOR.

Device API, for buffers that already live on the GPU (CuPy arrays, torch CUDA tensors, or
anything with ``__cuda_array_interface__`` / ``__dlpack__``), read in place::

    codec = GpuRSCodec(k=32, m=8, chunk_size=65536)
    parity = codec.encode(grads)          # grads: any dtype, k * chunk_size * S bytes
    codec.decode(chunks, present)         # chunks: (k + m, chunk_size) bytes, fixed in place

A buffer of ``S * k * chunk_size`` bytes is ``S`` submessages of ``k`` chunks laid out as
the Erasure Coding scheme's data lane; :meth:`GpuRSCodec.encode` returns ``(S, m,
chunk_size)`` parity, the scheme's parity lane. ``chunk_size`` must be a multiple of 16
(one vector per thread) and buffers 16-byte aligned. Work runs on CuPy's current stream;
for a torch tensor, on torch's current stream of its device.

The host adapters ``mds-gpu`` and ``xor-gpu`` are in
:mod:`sdr.backends.gpu.codecs.host_adapters`. See docs/gpu-codec.md.

Importing this module needs neither CuPy nor a GPU; constructing a codec does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from sdr.backends.gpu.codecs.kernels import MAX_INPUTS, THREADS, gf_matmul_kernel, xor_sets_kernel
from sdr.backends.gpu.codecs.matrix import decode_plan, generator_matrix
from sdr.codecs.base import TooManyLosses
from sdr.errors import ConfigError

__all__ = [
    "GpuRSCodec",
    "GpuXORCodec",
    "as_device_bytes",
    "gpu_available",
]

_MAX_BLOCKS_X = 1024
_EC_TYPE = "isa_l_rs_vand_inv"  # sdr.codecs.mds.DEFAULT_EC_TYPE, without importing pyeclib


def _cupy() -> Any:
    try:
        import cupy  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise ConfigError("the GPU codec needs CuPy (pip install sdr-rdma[gpu])") from exc
    return cupy


def gpu_available() -> bool:
    """True when CuPy imports and sees a CUDA device."""
    try:
        return int(_cupy().cuda.runtime.getDeviceCount()) > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device all mean "no"
        return False


def as_device_bytes(buf: Any) -> Any:
    """A flat CuPy ``uint8`` view of a GPU buffer (CuPy, torch CUDA, DLPack), no copy."""
    cp = _cupy()
    if isinstance(buf, cp.ndarray):
        arr = buf
    elif hasattr(buf, "__cuda_array_interface__"):
        arr = cp.asarray(buf)
    elif hasattr(buf, "__dlpack__"):
        arr = cp.from_dlpack(buf)
    else:
        raise ConfigError(f"expected a GPU array (CuPy, torch CUDA, DLPack), got {type(buf)!r}")
    if not arr.flags.c_contiguous:
        raise ConfigError(f"GPU buffer must be C-contiguous, got strides {arr.strides}")
    return arr.reshape(-1).view(cp.uint8)


@contextlib.contextmanager
def _stream_of(buf: Any) -> Iterator[None]:
    """Run on torch's current stream for a torch tensor, else CuPy's current stream."""
    if type(buf).__module__.startswith("torch"):
        import torch  # noqa: PLC0415 - only for torch inputs

        cp = _cupy()
        with cp.cuda.ExternalStream(torch.cuda.current_stream(buf.device).cuda_stream):
            yield
    else:
        yield


class _GpuCodecBase:
    """Shared geometry checks and launches."""

    def __init__(self, k: int, m: int, chunk_size: int) -> None:
        for label, value in (("k", k), ("m", m), ("chunk_size", chunk_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{label}={value!r}: expected an integer >= 1")
        if chunk_size % 16:
            raise ConfigError(f"chunk_size={chunk_size}: the GPU codec needs a multiple of 16")
        if k + m > MAX_INPUTS:
            raise ConfigError(f"k + m = {k + m}: expected <= {MAX_INPUTS}")
        self.k, self.m, self.chunk_size = k, m, chunk_size
        self._cp = _cupy()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self.k}, m={self.m}, chunk_size={self.chunk_size})"

    def _submessages(self, data: Any, rows: int) -> Any:
        flat = as_device_bytes(data)
        per = rows * self.chunk_size
        if flat.size == 0 or flat.size % per:
            raise ConfigError(
                f"GPU buffer of {flat.size} bytes: expected a multiple of {rows} x "
                f"{self.chunk_size} = {per} bytes (whole submessages)"
            )
        if flat.data.ptr % 16:
            raise ConfigError("GPU buffer must be 16-byte aligned")
        return flat.reshape(-1, rows, self.chunk_size)

    def _ptrs(self, base: Any, rows: Sequence[int]) -> Any:
        cs = self.chunk_size
        start = base.data.ptr
        return self._cp.asarray([start + r * cs for r in rows], dtype=self._cp.uint64)

    def _grid(self, subs: int) -> tuple[int, int]:
        vecs = self.chunk_size // 16
        return (min(_MAX_BLOCKS_X, -(-vecs // THREADS)), subs)

    def _matmul(
        self, src: Any, rows_in: Sequence[int], dst: Any, rows_out: Sequence[int], coeffs: Any
    ) -> None:
        cp = self._cp
        n_in, n_out = len(rows_in), len(rows_out)
        kernel = gf_matmul_kernel(n_out)
        args = (
            self._ptrs(src[0], rows_in),
            np.int64(src.strides[0]),
            np.int32(n_in),
            self._ptrs(dst[0], rows_out),
            np.int64(dst.strides[0]),
            coeffs if isinstance(coeffs, cp.ndarray) else cp.asarray(coeffs.reshape(-1)),
            np.int64(self.chunk_size // 16),
        )
        kernel(self._grid(src.shape[0]), (THREADS,), args)

    def _xor(
        self, src: Any, sets: Sequence[Sequence[int]], dst: Any, rows_out: Sequence[int]
    ) -> None:
        cp = self._cp
        flat = [i for s in sets for i in s]
        starts = np.cumsum([0, *(len(s) for s in sets)]).astype(np.int32)
        args = (
            self._ptrs(src[0], flat),
            np.int64(src.strides[0]),
            cp.asarray(starts),
            np.int32(len(sets)),
            self._ptrs(dst[0], rows_out),
            np.int64(dst.strides[0]),
            np.int64(self.chunk_size // 16),
        )
        xor_sets_kernel()(self._grid(src.shape[0]), (THREADS,), args)

    def _parity_out(self, subs: int, parity: Any | None) -> Any:
        if parity is None:
            return self._cp.empty((subs, self.m, self.chunk_size), dtype=self._cp.uint8)
        out = as_device_bytes(parity)
        if out.size != subs * self.m * self.chunk_size:
            raise ConfigError(
                f"parity: {out.size} bytes, expected {subs} x {self.m} x {self.chunk_size}"
            )
        return out.reshape(subs, self.m, self.chunk_size)

    def _check_present(self, present: Sequence[bool]) -> list[bool]:
        flags = [bool(p) for p in present]
        if len(flags) != self.k + self.m:
            raise ConfigError(f"present: expected {self.k + self.m} flags, got {len(flags)}")
        return flags


class GpuRSCodec(_GpuCodecBase):
    """Systematic Reed-Solomon over GF(2^8) with ISA-L's ``isa_l_rs_vand_inv`` matrix."""

    def __init__(self, k: int, m: int, chunk_size: int, ec_type: str = _EC_TYPE) -> None:
        super().__init__(k, m, chunk_size)
        self.generator = generator_matrix(k, m, ec_type)
        self._generator_dev = self._cp.asarray(self.generator.reshape(-1))
        self._plans: dict[tuple[bool, ...], tuple[list[int], list[int], np.ndarray]] = {}

    def encode(self, data: Any, parity: Any | None = None) -> Any:
        """Parity of ``S`` submessages (``S * k * chunk_size`` bytes): a ``(S, m,
        chunk_size)`` CuPy array (``parity`` if given, written in place)."""
        with _stream_of(data):
            src = self._submessages(data, self.k)
            out = self._parity_out(src.shape[0], parity)
            self._matmul(src, range(self.k), out, range(self.m), self._generator_dev)
        return out

    def decode(self, chunks: Any, present: Sequence[bool]) -> list[int]:
        """Rebuild lost data chunks in place; ``chunks``: ``S`` submessages of ``k + m``
        chunks (data then parity) sharing one loss pattern ``present``. Returns the
        rebuilt data indices; TooManyLosses beyond ``m`` losses."""
        flags = self._check_present(present)
        if flags.count(False) > self.m:
            raise TooManyLosses(f"{self!r}: {flags.count(False)} chunks lost, at most {self.m}")
        key = tuple(flags)
        if key not in self._plans:
            self._plans[key] = decode_plan(self.generator, flags)
        missing, survivors, coeffs = self._plans[key]
        if missing:
            with _stream_of(chunks):
                buf = self._submessages(chunks, self.k + self.m)
                self._matmul(buf, survivors, buf, missing, coeffs)
        return missing


class GpuXORCodec(_GpuCodecBase):
    """Interleaved XOR parity: parity ``g`` = XOR of data chunks ``j`` with ``j % m == g``."""

    def encode(self, data: Any, parity: Any | None = None) -> Any:
        """Parity of ``S`` submessages, as :meth:`GpuRSCodec.encode`."""
        with _stream_of(data):
            src = self._submessages(data, self.k)
            out = self._parity_out(src.shape[0], parity)
            groups = [list(range(g, self.k, self.m)) for g in range(self.m)]
            self._xor(src, groups, out, range(self.m))
        return out

    def decode(self, chunks: Any, present: Sequence[bool]) -> list[int]:
        """Rebuild lost data chunks in place (one per group, with its parity present)."""
        flags = self._check_present(present)
        k, m = self.k, self.m
        missing = [i for i in range(k) if not flags[i]]
        sets = []
        for i in missing:
            g = i % m
            group = [j for j in range(g, k, m) if j != i]
            if not flags[k + g] or not all(flags[j] for j in group):
                raise TooManyLosses(f"{self!r}: group {g} cannot rebuild chunk {i}")
            sets.append([*group, k + g])
        if missing:
            with _stream_of(chunks):
                buf = self._submessages(chunks, k + m)
                self._xor(buf, sets, buf, missing)
        return missing
