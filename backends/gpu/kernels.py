"""CUDA C source of the plan executor kernel (compiled at run time by CuPy/NVRTC).

One kernel interprets a rank's lowered ops. Every op is split into per-block byte slices
of whole 16-byte units, the same way on every rank, so block ``b`` of a reader consumes
exactly what block ``b`` of the writer produced: semaphores are per (peer, block) and no
cross-block synchronisation is needed except at explicit ``barrier`` ops.

Buffer ids: 0 input, 1 output, 2 + k the registered buffers of ``tab[k]``: even ids are
scratch, odd ids LL packets (2 own scratch, 3 own packets, 4 + 2p peer p's scratch, 5 + 2p
peer p's packets). Scratch and packets are double buffered by call parity; ``state[0]``
counts calls (LL flag = count + 1). No CUDA headers are needed: float16/bfloat16 are
converted with PTX ``cvt`` and bit operations.
"""

from __future__ import annotations

#: Op record: kind, nbytes, dst id, dst offset, peer, nsrc, then (src id, src offset) pairs.
MAX_SRCS = 16
OP_WORDS = 6 + 2 * MAX_SRCS
MAX_BLOCKS = 128
#: Semaphore slots per sender: one per thread block, plus one for host-launched verbs.
SEM_SLOTS = MAX_BLOCKS + 1
HOST_SLOT = MAX_BLOCKS
THREADS = 512
OP_CODES = {"put": 0, "get": 0, "copy": 0, "reduce": 1, "signal": 2, "wait": 3}
OP_CODES.update({"flush": 4, "barrier": 5})
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
#: state words: seq, blocks done, barrier count, barrier generation, error flag
STATE_WORDS = 8

SOURCE = r"""
#define MAXB %(SEM_SLOTS)d
#define OPW %(OP_WORDS)d
typedef unsigned long long u64;
typedef unsigned int u32;

#if SDR_DTYPE == 0
typedef float elem_t;
__device__ __forceinline__ float ld_f(elem_t x) { return x; }
__device__ __forceinline__ elem_t st_f(float x) { return x; }
#else
typedef unsigned short elem_t;
#if SDR_DTYPE == 1
__device__ __forceinline__ float ld_f(elem_t h) {
  float f; asm("cvt.f32.f16 %%0, %%1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ elem_t st_f(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %%0, %%1;" : "=h"(h) : "f"(f)); return h; }
#else
__device__ __forceinline__ float ld_f(elem_t b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ elem_t st_f(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (elem_t)((u >> 16) | 0x40u);
  return (elem_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
#endif
#endif
#define EPW (8 / sizeof(elem_t))

__device__ __forceinline__ uint4 ld_cg4(const char* p) {
  uint4 v; asm volatile("ld.global.cg.v4.u32 {%%0,%%1,%%2,%%3}, [%%4];"
    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }
__device__ __forceinline__ uint2 ld_cg2(const char* p) {
  uint2 v; asm volatile("ld.global.cg.v2.u32 {%%0,%%1}, [%%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v; }
__device__ __forceinline__ void st_pk(char* p, uint2 d, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%%0], {%%1,%%2,%%3,%%4};"
    :: "l"(p), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag) : "memory"); }
__device__ __forceinline__ uint2 ld_pk(const char* p, u32 flag, u32* err) {
  u32 d0, f0, d1, f1; long long t0 = clock64();
  do {
    asm volatile("ld.volatile.global.v4.u32 {%%0,%%1,%%2,%%3}, [%%4];"
      : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(p) : "memory");
    if (f0 == flag && f1 == flag) break;
    if (clock64() - t0 > 40000000000LL) { atomicExch(err, 1u); break; }
  } while (true);
  uint2 v; v.x = d0; v.y = d1; return v; }

/* 8 data bytes at p (w_bytes <= 8 valid), from plain memory or a packet. */
__device__ __forceinline__ uint2 ld_word(const char* base, long long off, int pk, int aligned,
                                         int w_bytes, u32 flag, u32* err) {
  if (pk) return ld_pk(base + (off / 8) * 16, flag, err);
  const char* p = base + off;
  if (aligned && w_bytes == 8) return ld_cg2(p);
  uint2 v; v.x = 0; v.y = 0; char* d = (char*)&v;
  for (int i = 0; i < w_bytes; ++i) d[i] = p[i];
  return v; }

__device__ __forceinline__ void st_word(char* base, long long off, int pk, int aligned,
                                        int w_bytes, uint2 v, u32 flag) {
  if (pk) { st_pk(base + (off / 8) * 16, v, flag); return; }
  char* p = base + off;
  if (aligned && w_bytes == 8) { *(uint2*)p = v; return; }
  const char* s = (const char*)&v;
  for (int i = 0; i < w_bytes; ++i) p[i] = s[i]; }

__device__ __forceinline__ void grid_barrier(u32* state, int nblocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile u32* gen = state + 3; u32 g = *gen; __threadfence();
    if (atomicAdd(state + 2, 1u) == (u32)nblocks - 1) {
      state[2] = 0; __threadfence(); atomicAdd(state + 3, 1u);
    }
    else { while (*gen == g) {} }
    __threadfence();
  }
  __syncthreads(); }

extern "C" __global__ void __launch_bounds__(%(THREADS)d)
sdr_exec(const long long* ops, int nops, u64 in_p, u64 out_p, const u64* tab,
         const u64* semtab, long long sh, long long ph, u64* sent, u64* expected,
         u32* state, int rank) {
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x, nt = blockDim.x;
  const u32 seq = *(volatile u32*)state; const u32 flag = seq + 1; const int parity = seq & 1;
  u32* err = state + 4;
  for (int o = 0; o < nops; ++o) {
    const long long* op = ops + (long long)o * OPW;
    const int kind = (int)op[0]; const long long nbytes = op[1];
    if (kind == 2) {  /* signal */
      __syncthreads();
      if (tid == 0) {
        int p = (int)op[4]; __threadfence_system();
        u64 v = ++sent[p * MAXB + b];
        volatile u64* dst = (volatile u64*)(semtab[p]) + rank * MAXB + b; *dst = v;
      }
      continue;
    }
    if (kind == 3) {  /* wait */
      if (tid == 0) {
        int p = (int)op[4]; u64 want = ++expected[p * MAXB + b];
        volatile u64* s = (volatile u64*)(semtab[rank]) + p * MAXB + b;
        long long t0 = clock64();
        while (*s < want) { if (clock64() - t0 > 40000000000LL) { atomicExch(err, 2u); break; } }
        __threadfence_system();
      }
      __syncthreads();
      continue;
    }
    if (kind == 4) { __syncthreads(); if (tid == 0) __threadfence_system(); continue; }
    if (kind == 5) { grid_barrier(state, nb); continue; }
    /* data op: this block's slice of whole 16-byte units */
    long long units = (nbytes + 15) / 16, per = (units + nb - 1) / nb;
    long long lo = b * per * 16; if (lo > nbytes) lo = nbytes;
    long long hi = lo + per * 16; if (hi > nbytes) hi = nbytes;
    if (lo >= hi) { __syncthreads(); continue; }
    const int nsrc = (int)op[5];
    char* srcs[%(MAX_SRCS)d]; int spk[%(MAX_SRCS)d];
    int any_pk = 0; u64 align = 0;
    for (int i = 0; i < nsrc; ++i) {
      int id = (int)op[6 + 2 * i]; long long off = op[7 + 2 * i];
      char* base = id == 0 ? (char*)in_p : id == 1 ? (char*)out_p
        : (char*)tab[id - 2] + parity * ((id & 1) ? ph : sh);
      spk[i] = (id >= 2) && (id & 1); srcs[i] = base + off; any_pk |= spk[i];
      if (!spk[i]) align |= (u64)srcs[i];
    }
    int did = (int)op[2]; long long doff = op[3];
    char* dst = (did == 0 ? (char*)in_p : did == 1 ? (char*)out_p
      : (char*)tab[did - 2] + parity * ((did & 1) ? ph : sh)) + doff;
    int dpk = (did >= 2) && (did & 1);
    if (!dpk) align |= (u64)dst;
    if (!any_pk && !dpk && (align & 15) == 0 && kind == 0) {
      /* plain copy: 16-byte vectors, four loads in flight per thread */
      const long long step = nt * 16LL, vhi = lo + ((hi - lo) / 16) * 16;
      long long i = lo + tid * 16LL;
      for (; i + 3 * step < vhi; i += 4 * step) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = ld_cg4(srcs[0] + i + u * step);
#pragma unroll
        for (int u = 0; u < 4; ++u) *(uint4*)(dst + i + u * step) = v[u];
      }
      for (; i < vhi; i += step) *(uint4*)(dst + i) = ld_cg4(srcs[0] + i);
      for (long long j = vhi + tid; j < hi; j += nt) dst[j] = srcs[0][j];
    } else if (!any_pk && !dpk && (align & 15) == 0) {
      /* plain reduce: 16-byte vectors, float accumulation, four vectors per thread */
      const int E = 16 / sizeof(elem_t);
      const long long step = nt * 16LL, vhi = lo + ((hi - lo) / 16) * 16;
      long long i = lo + tid * 16LL;
      for (; i + 3 * step < vhi; i += 4 * step) {
        float acc[4][16 / sizeof(elem_t)];
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = ld_cg4(srcs[0] + i + u * step);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const elem_t* e = (const elem_t*)&v[u];
#pragma unroll
          for (int k = 0; k < E; ++k) acc[u][k] = ld_f(e[k]);
        }
        for (int s = 1; s < nsrc; ++s) {
#pragma unroll
          for (int u = 0; u < 4; ++u) v[u] = ld_cg4(srcs[s] + i + u * step);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const elem_t* e = (const elem_t*)&v[u];
#pragma unroll
            for (int k = 0; k < E; ++k) acc[u][k] += ld_f(e[k]);
          }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          uint4 r; elem_t* g = (elem_t*)&r;
#pragma unroll
          for (int k = 0; k < E; ++k) g[k] = st_f(acc[u][k]);
          *(uint4*)(dst + i + u * step) = r;
        }
      }
      for (; i < vhi; i += step) {
        float acc[16 / sizeof(elem_t)];
        uint4 v = ld_cg4(srcs[0] + i); const elem_t* e = (const elem_t*)&v;
#pragma unroll
        for (int k = 0; k < E; ++k) acc[k] = ld_f(e[k]);
        for (int s = 1; s < nsrc; ++s) {
          uint4 w = ld_cg4(srcs[s] + i); const elem_t* f = (const elem_t*)&w;
#pragma unroll
          for (int k = 0; k < E; ++k) acc[k] += ld_f(f[k]);
        }
        uint4 r; elem_t* g = (elem_t*)&r;
#pragma unroll
        for (int k = 0; k < E; ++k) g[k] = st_f(acc[k]);
        *(uint4*)(dst + i) = r;
      }
      const long long es = sizeof(elem_t);
      for (long long j = vhi + tid * es; j < hi; j += nt * es) {
        float a = ld_f(*(const elem_t*)(srcs[0] + j));
        for (int s = 1; s < nsrc; ++s) a += ld_f(*(const elem_t*)(srcs[s] + j));
        *(elem_t*)(dst + j) = st_f(a);
      }
    } else if (kind == 0 && !spk[0] && dpk && (align & 7) == 0) {
      /* put as LL packets from plain memory: four words in flight per thread */
      const long long step = nt * 8LL;
      long long w = lo + tid * 8LL;
      for (; w + 3 * step + 8 <= hi; w += 4 * step) {
        uint2 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = ld_cg2(srcs[0] + w + u * step);
#pragma unroll
        for (int u = 0; u < 4; ++u) st_pk(dst + ((w + u * step) / 8) * 16, v[u], flag);
      }
      for (; w < hi; w += step) {
        int wb = (int)((hi - w) < 8 ? (hi - w) : 8);
        st_word(dst, w, 1, 1, wb, ld_word(srcs[0], w, 0, 1, wb, flag, err), flag);
      }
    } else {
      /* 8-byte words: LL packets on either side, or unaligned plain memory */
      int aligned = (align & 7) == 0;
      for (long long w = lo + tid * 8LL; w < hi; w += nt * 8LL) {
        int wb = (int)((hi - w) < 8 ? (hi - w) : 8);
        if (kind == 0) {
          uint2 v = ld_word(srcs[0], w, spk[0], aligned, wb, flag, err);
          st_word(dst, w, dpk, aligned, wb, v, flag);
        } else {
          float acc[EPW];
          uint2 v = ld_word(srcs[0], w, spk[0], aligned, wb, flag, err);
          const elem_t* e = (const elem_t*)&v;
#pragma unroll
          for (int k = 0; k < (int)EPW; ++k) acc[k] = ld_f(e[k]);
          for (int s = 1; s < nsrc; ++s) {
            uint2 x = ld_word(srcs[s], w, spk[s], aligned, wb, flag, err);
            const elem_t* f = (const elem_t*)&x;
#pragma unroll
            for (int k = 0; k < (int)EPW; ++k) acc[k] += ld_f(f[k]);
          }
          uint2 r; elem_t* g = (elem_t*)&r;
#pragma unroll
          for (int k = 0; k < (int)EPW; ++k) g[k] = st_f(acc[k]);
          st_word(dst, w, dpk, aligned, wb, r, flag);
        }
      }
    }
    __syncthreads();
  }
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(state + 1, 1u) == (u32)nb - 1) {
      state[1] = 0; __threadfence(); state[0] = seq + 1;
    }
  }
}
"""


HOST_SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
extern "C" __global__ void sdr_signal(u64 slot, u64 value) {
  __threadfence_system();
  *(volatile u64*)slot = value;
}
extern "C" __global__ void sdr_wait(u64 slot, u64 value, u32* err) {
  long long t0 = clock64();
  while (*(volatile u64*)slot < value) {
    if (clock64() - t0 > 40000000000LL) { atomicExch(err, 2u); break; }
  }
  __threadfence_system();
}
extern "C" __global__ void sdr_put_packets(u64 dst_p, u64 src_p, long long nbytes, u32 flag) {
  char* dst = (char*)dst_p; const char* src = (const char*)src_p;
  for (long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 8; w < nbytes;
       w += (long long)gridDim.x * blockDim.x * 8) {
    uint2 v; v.x = 0; v.y = 0; char* d = (char*)&v;
    int wb = (int)(nbytes - w < 8 ? nbytes - w : 8);
    for (int i = 0; i < wb; ++i) d[i] = src[w + i];
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
      :: "l"(dst + (w / 8) * 16), "r"(v.x), "r"(flag), "r"(v.y), "r"(flag) : "memory");
  }
}
extern "C" __global__ void sdr_read_packets(u64 dst_p, u64 src_p, long long nbytes, u32 flag,
                                            u32* err) {
  char* dst = (char*)dst_p; const char* src = (const char*)src_p;
  for (long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 8; w < nbytes;
       w += (long long)gridDim.x * blockDim.x * 8) {
    u32 d0, f0, d1, f1; long long t0 = clock64();
    do {
      asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(src + (w / 8) * 16) : "memory");
      if (f0 == flag && f1 == flag) break;
      if (clock64() - t0 > 40000000000LL) { atomicExch(err, 1u); break; }
    } while (true);
    uint2 v; v.x = d0; v.y = d1; const char* s = (const char*)&v;
    int wb = (int)(nbytes - w < 8 ? nbytes - w : 8);
    for (int i = 0; i < wb; ++i) dst[w + i] = s[i];
  }
}
"""


def kernel_source() -> str:
    """The executor's CUDA C source with its constants filled in."""
    return SOURCE % {
        "SEM_SLOTS": SEM_SLOTS,
        "OP_WORDS": OP_WORDS,
        "THREADS": THREADS,
        "MAX_SRCS": MAX_SRCS,
    }
