"""CUDA kernels of the GPU erasure codec (CUDA C, compiled at run time by CuPy/NVRTC).

Two kernels, both over 16-byte vectors (``uint4``) of chunks addressed through a device
array of pointers, batched over submessages by a byte stride (grid ``y``):

``gf_matmul<ROWS>``: ``out[r] = XOR_i coeffs[r, i] * in[i]`` over GF(2^8) (Reed-Solomon
encode with the generator matrix; decode with rows of an inverted survivor matrix). A
coefficient times a byte is linear over GF(2): ``c * x = XOR over set bits t of c of
x * 2^t``, and ``x * 2`` ("xtime") of four packed bytes is three logic operations and a
multiply by 0x1D. So each thread doubles its input vector 7 times and XORs the powers
whose bit is set in the coefficient into ``ROWS`` accumulators: no tables, no shared
memory lookups, and the coefficient bits are the same across a warp (no divergence).
``ROWS`` is a compile-time constant so the accumulators stay in registers.

``xor_sets``: ``out[r] = XOR of in[set_start[r] .. set_start[r + 1])`` (XOR parity groups
and XOR decode).

This module only holds source text and the compile cache; importing it needs no CUDA.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["THREADS", "MAX_INPUTS", "gf_matmul_kernel", "xor_sets_kernel"]

THREADS = 256
"""Threads per block."""

MAX_INPUTS = 256
"""Most input chunks one launch combines (k + m <= 256 in GF(2^8))."""

_SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ uint4 zero4() {
  uint4 z; z.x = 0u; z.y = 0u; z.z = 0u; z.w = 0u; return z;
}

__device__ __forceinline__ u32 xtime(u32 w) {
  return ((w & 0x7f7f7f7fu) << 1) ^ (((w >> 7) & 0x01010101u) * 0x1du);
}

extern "C" __global__ void __launch_bounds__(THREADS)
gf_matmul(const u64* __restrict__ in_ptrs, long long in_stride, int n_in,
          const u64* __restrict__ out_ptrs, long long out_stride,
          const unsigned char* __restrict__ coeffs, long long n_vec) {
  __shared__ unsigned char c_s[ROWS * MAX_INPUTS];
  for (int t = threadIdx.x; t < ROWS * n_in; t += blockDim.x) c_s[t] = coeffs[t];
  __syncthreads();
  const long long sub = blockIdx.y;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n_vec;
       v += (long long)gridDim.x * blockDim.x) {
    uint4 acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = zero4();
#pragma unroll 2
    for (int i = 0; i < n_in; i++) {
      const uint4* src = (const uint4*)(in_ptrs[i] + sub * in_stride);
      uint4 p = src[v];
      u32 c[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; r++) c[r] = c_s[r * n_in + i];
#pragma unroll
      for (int t = 0; t < 8; t++) {
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
          const u32 mask = 0u - ((c[r] >> t) & 1u);
          acc[r].x ^= p.x & mask; acc[r].y ^= p.y & mask;
          acc[r].z ^= p.z & mask; acc[r].w ^= p.w & mask;
        }
        if (t < 7) { p.x = xtime(p.x); p.y = xtime(p.y); p.z = xtime(p.z); p.w = xtime(p.w); }
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      uint4* dst = (uint4*)(out_ptrs[r] + sub * out_stride);
      dst[v] = acc[r];
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS)
xor_sets(const u64* __restrict__ in_ptrs, long long in_stride,
         const int* __restrict__ set_start, int n_out,
         const u64* __restrict__ out_ptrs, long long out_stride, long long n_vec) {
  const long long sub = blockIdx.y;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n_vec;
       v += (long long)gridDim.x * blockDim.x) {
    for (int r = 0; r < n_out; r++) {
      uint4 acc = zero4();
      for (int i = set_start[r]; i < set_start[r + 1]; i++) {
        const uint4 x = ((const uint4*)(in_ptrs[i] + sub * in_stride))[v];
        acc.x ^= x.x; acc.y ^= x.y; acc.z ^= x.z; acc.w ^= x.w;
      }
      ((uint4*)(out_ptrs[r] + sub * out_stride))[v] = acc;
    }
  }
}
"""


@functools.cache
def _module(rows: int) -> Any:
    import cupy  # noqa: PLC0415 - optional dependency

    options = (
        f"-DROWS={rows}",
        f"-DTHREADS={THREADS}",
        f"-DMAX_INPUTS={MAX_INPUTS}",
        "--std=c++17",
    )
    return cupy.RawModule(code=_SOURCE, options=options)


def gf_matmul_kernel(rows: int) -> Any:
    """The compiled ``gf_matmul`` for ``rows`` outputs (cached per row count)."""
    return _module(rows).get_function("gf_matmul")


def xor_sets_kernel() -> Any:
    """The compiled ``xor_sets`` kernel."""
    return _module(1).get_function("xor_sets")
