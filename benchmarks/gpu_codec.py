"""GPU erasure codec throughput (GB/s of data) against the CPU codec in the same run.

Measures :mod:`sdr.backends.gpu.codecs` on a message of ``--data`` bytes cut into (k, m)
submessages of ``--chunk`` chunks (one launch encodes them all, the Erasure Coding
scheme's layout), and one submessage per launch (what a per-submessage pipeline would
issue). Decode loses ``m`` data chunks per submessage (the most work for Reed-Solomon) or
one per group (XOR). Peers in the same run: the CPU ``mds`` and ``xor`` codecs on one core
(ratio), a device-to-device copy of the data (the memory ceiling) and the pinned
host<->device copies that GPU-tensor registration (sdr.dlpack) pays. Checks that the GPU
parity is bit-identical to the CPU codec's before timing.

    python benchmarks/gpu_codec.py --k 32 --m 8 --chunk 64KiB --data 256MiB --out gpu_codec.json

Times with CUDA events: median of ``--reps`` launches after warm-up.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sdr.backends.gpu.codecs import GpuRSCodec, GpuXORCodec
from sdr.codecs import get_codec
from sdr.units import parse_size


def gpu_time(cp: Any, fn: Callable[[], object], reps: int) -> float:
    """Median seconds of ``fn`` on the current stream (CUDA events), after 3 warm-ups."""
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return statistics.median(times)


def cpu_time(fn: Callable[[], object], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run(k: int, m: int, cs: int, data_bytes: int, reps: int) -> dict[str, Any]:
    import cupy as cp

    subs = max(1, data_bytes // (k * cs))
    nbytes = subs * k * cs
    rng = np.random.default_rng(0)
    host = rng.integers(0, 256, (subs, k, cs), dtype=np.uint8)
    data = cp.asarray(host)
    rs, xor = GpuRSCodec(k, m, cs), GpuXORCodec(k, m, cs)
    cpu_rs, cpu_xor = get_codec("mds", k, m, cs), get_codec("xor", k, m, cs)
    rs_parity, xor_parity = rs.encode(data), xor.encode(data)
    identical = {
        "mds": bool(np.array_equal(rs_parity[0].get(), np.stack(cpu_rs.encode(host[0])))),
        "xor": bool(np.array_equal(xor_parity[0].get(), np.stack(cpu_xor.encode(host[0])))),
    }
    rs_chunks = cp.concatenate([data, rs_parity], axis=1)
    xor_chunks = cp.concatenate([data, xor_parity], axis=1)
    rs_present = [i >= m for i in range(k)] + [True] * m  # first m data chunks lost
    xor_present = [i >= m for i in range(k)] + [True] * m  # chunks 0..m-1: one per group
    one = data[:1]
    out: dict[str, float] = {}
    out["mds_encode"] = nbytes / gpu_time(cp, lambda: rs.encode(data, rs_parity), reps)
    out["mds_decode"] = nbytes / gpu_time(cp, lambda: rs.decode(rs_chunks, rs_present), reps)
    out["xor_encode"] = nbytes / gpu_time(cp, lambda: xor.encode(data, xor_parity), reps)
    out["xor_decode"] = nbytes / gpu_time(cp, lambda: xor.decode(xor_chunks, xor_present), reps)
    sub_out = rs_parity[:1]
    out["mds_encode_one_submessage"] = (k * cs) / gpu_time(
        cp, lambda: rs.encode(one, sub_out), reps
    )
    copy_dst = cp.empty_like(data)
    out["d2d_copy"] = nbytes / gpu_time(cp, lambda: cp.copyto(copy_dst, data), reps)
    pinned = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), dtype=np.uint8, count=nbytes)
    flat = data.reshape(-1)
    out["d2h_pinned"] = nbytes / cpu_time(lambda: flat.get(out=pinned), reps)
    out["h2d_pinned"] = nbytes / cpu_time(
        lambda: (flat.set(pinned), cp.cuda.Device().synchronize()), reps
    )
    sub = np.ascontiguousarray(host[0])
    out["cpu_mds_encode_1core"] = (k * cs) / cpu_time(lambda: cpu_rs.encode(sub), reps)
    out["cpu_xor_encode_1core"] = (k * cs) / cpu_time(lambda: cpu_xor.encode(sub), reps)
    props = cp.cuda.runtime.getDeviceProperties(0)
    return {
        "machine": {
            "platform": platform.platform(),
            "gpu": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
            "sms": props["multiProcessorCount"],
        },
        "versions": {
            "python": sys.version.split()[0],
            "cupy": cp.__version__,
            "numpy": np.__version__,
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        },
        "command": sys.argv,
        "params": {"k": k, "m": m, "chunk_size": cs, "submessages": subs, "data_bytes": nbytes},
        "bit_identical": identical,
        "bytes_per_s": out,
        "ratios": {
            "mds_encode_gpu_over_cpu_core": out["mds_encode"] / out["cpu_mds_encode_1core"],
            "xor_encode_gpu_over_cpu_core": out["xor_encode"] / out["cpu_xor_encode_1core"],
            "mds_encode_over_d2d_copy": out["mds_encode"] / out["d2d_copy"],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--m", type=int, default=8)
    ap.add_argument("--chunk", default="64KiB")
    ap.add_argument("--data", default="256MiB")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="gpu_codec.json")
    args = ap.parse_args()
    doc = run(args.k, args.m, parse_size(args.chunk), parse_size(args.data), args.reps)
    print(
        f"{doc['machine']['gpu']}  k={args.k} m={args.m} chunk={args.chunk} "
        f"data={doc['params']['data_bytes'] >> 20} MiB  bit-identical={doc['bit_identical']}"
    )
    print(f"{'operation':<28}{'GB/s':>10}")
    for name, value in doc["bytes_per_s"].items():
        print(f"{name:<28}{value / 1e9:>10.2f}")
    for name, value in doc["ratios"].items():
        print(f"{name:<40}{value:>8.1f}x")
    Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
