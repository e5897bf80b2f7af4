"""Correctness checks of every plan on GPU ranks, run inside each rank.

Every rank draws every rank's input from a seeded generator, so it can compute the NumPy
reference itself; inputs are small integers, exact in float16/bfloat16 whatever the
summation order, so results are compared exactly. Returns a list of failure strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdr.backends.collectives.dtypes import bf16_to_f32, f32_to_bf16, storage_dtype
from sdr.collectives import algorithms_for

DTYPES = ("float32", "float16", "bfloat16")


def _inputs(world: int, count: int, dtype: str, seed: int) -> list[np.ndarray]:
    out = []
    for r in range(world):
        vals = np.random.default_rng(seed * 100 + r).integers(-8, 9, count).astype(np.float32)
        out.append(f32_to_bf16(vals) if dtype == "bfloat16" else vals.astype(storage_dtype(dtype)))
    return out


def _f32(a: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_to_f32(a) if dtype == "bfloat16" else a.astype(np.float32)


def _one(comm: Any, coll: str, alg: str, count: int, dtype: str, in_place: bool) -> str | None:
    cp = comm.cp
    n, r = comm.world_size, comm.rank
    dt = "bfloat16" if dtype == "bfloat16" else None
    per = count * (n if coll == "reduce_scatter" else 1)
    xs = _inputs(n, per, dtype, seed=count % 997)
    x = cp.asarray(xs[r])
    if coll == "allreduce":
        out = x if in_place else cp.full_like(x, 7)
        got = comm.allreduce(x, out, dtype=dt, algorithm=alg)
        want = np.sum([_f32(v, dtype) for v in xs], axis=0)
        ok = np.array_equal(_f32(cp.asnumpy(got), dtype), want)
    elif coll == "allgather":
        out = cp.full(per * n, 7, x.dtype)
        if in_place:
            out[r * per : (r + 1) * per] = x
            x = out[r * per : (r + 1) * per]
        got = comm.allgather(x, out, dtype=dt, algorithm=alg)
        ok = np.array_equal(cp.asnumpy(got), np.concatenate(xs))
    elif coll == "reduce_scatter":
        out = x[r * count : (r + 1) * count] if in_place else cp.full(count, 7, x.dtype)
        got = comm.reduce_scatter(x, out, dtype=dt, algorithm=alg)
        want = np.sum([_f32(v, dtype) for v in xs], axis=0).reshape(n, count)[r]
        ok = np.array_equal(_f32(cp.asnumpy(got), dtype), want)
    else:
        root = n - 1
        got = comm.broadcast(x, root, dtype=dt, algorithm=alg)
        ok = np.array_equal(cp.asnumpy(got), xs[root])
    comm.check()
    if ok:
        return None
    return f"rank {r}: {coll} {alg} count={count} {dtype} in_place={in_place} wrong"


def check_all(comm: Any, counts: tuple[int, ...] = (1, 3, 1001, 65_536, 1_048_583)) -> list[str]:
    """Every algorithm x dtype x count x in-place; returns failures (empty when all pass)."""
    failures = []
    for coll in ("allreduce", "allgather", "reduce_scatter", "broadcast"):
        algs = algorithms_for(coll) + (["nccl"] if comm.nccl is not None else [])
        for alg in algs:
            for dtype in DTYPES:
                for count in counts:
                    for in_place in (False, True):
                        if coll == "broadcast" and in_place:
                            continue
                        err = _one(comm, coll, alg, count, dtype, in_place)
                        if err:
                            failures.append(err)
    return failures


def check_graph(comm: Any, count: int = 4099, calls: int = 3, replays: int = 4) -> list[str]:
    """Capture ``calls`` allreduces of each algorithm in a CUDA graph, replay with new data."""
    cp = comm.cp
    failures = []
    n, r = comm.world_size, comm.rank
    for alg in algorithms_for("allreduce"):
        x = cp.zeros(count, cp.float32)
        out = cp.zeros(count, cp.float32)
        comm.allreduce(x, out, algorithm=alg)  # warm-up: compile, grow scratch
        cp.cuda.Device().synchronize()
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            for _ in range(calls):
                comm.allreduce(x, out, algorithm=alg)
            graph = stream.end_capture()
        for rep in range(replays):
            xs = _inputs(n, count, "float32", seed=rep + 1)
            x.set(xs[r])
            cp.cuda.Device().synchronize()
            comm.bootstrap.barrier()
            graph.launch(stream)
            stream.synchronize()
            want = np.sum(xs, axis=0)
            if not np.array_equal(cp.asnumpy(out), want):
                failures.append(f"rank {r}: graph replay {rep} of {alg} wrong")
        comm.check()
    return failures


def check_channels(comm: Any, nbytes: int = 1003) -> list[str]:
    """Host-launched channel verbs between ranks 0 and 1: put/signal/wait, LL packets, get."""
    cp = comm.cp
    if comm.rank > 1:
        return []
    data = cp.arange(nbytes, dtype=cp.uint8)
    flag = 0xABCD0001
    ch = comm.channel(1 - comm.rank)
    failures = []
    if comm.rank == 0:
        ch.put(0, data, 0, nbytes)
        ch.put_packets(0, data, 0, nbytes, flag)
        ch.signal()
        ch.wait()  # rank 1 has read everything
        back = cp.zeros(nbytes, cp.uint8)
        ch.get(back, 0, 0, nbytes)  # what we put, read back from the peer
        ch.flush()
        if not bool((back == data).all()):
            failures.append("rank 0: get returned wrong bytes")
    else:
        ch.wait()
        got = cp.zeros(nbytes, cp.uint8)
        cp.cuda.runtime.memcpyAsync(
            got.data.ptr, comm.region.scratch(1), nbytes, 3, cp.cuda.get_current_stream().ptr
        )
        pk = cp.zeros(nbytes, cp.uint8)
        ch.read_packets(pk, 0, 0, nbytes, flag)
        ch.signal()
        ch.flush()
        if not bool((got == data).all()):
            failures.append("rank 1: put/signal/wait delivered wrong bytes")
        if not bool((pk == data).all()):
            failures.append("rank 1: LL packets delivered wrong bytes")
    ch.check()
    return failures
