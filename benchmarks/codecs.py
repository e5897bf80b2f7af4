"""Erasure codec throughput: encode and decode MB/s of data for the MDS and XOR codecs.

Measures the SDK's codecs (``sdr.codecs``) on one (k, m) submessage of chunks that tile one
buffer, as the Erasure Coding scheme hands them over, and in the same run two peers: raw
pyeclib calls with no wrapper (the wrapper's overhead is the ratio) and ISA-L's
``ec_encode_data`` called directly on the buffers (what pyeclib's copies cost). Decode
loses ``m`` data chunks: for MDS ``m`` random data chunks (the most work), for XOR one per
group. Then runs 1..N processes side by side to see how encode and decode scale over cores,
and derives the cores needed to keep up with a 400 Gbit/s link.

    python benchmarks/codecs.py --k 32 --m 8 --chunk 64KiB --reps 7 --procs 1,2,4

Prints a table and writes JSON (machine, versions, command, parameters, results).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import math
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np
from pyeclib.ec_iface import ECDriver

from sdr.codecs import get_codec
from sdr.codecs.mds import DEFAULT_EC_TYPE, HEADER_SIZE
from sdr.units import parse_rate, parse_size

Op = Callable[[], object]

# glibc mallopt parameters: see mallopt(3).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_malloc() -> bool:
    """Keep freed memory in the heap (glibc): pyeclib allocates fresh fragment buffers on
    every call, and with the default thresholds glibc hands large frees back to the kernel,
    so the next call page-faults them in again. Returns whether it could be applied."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt"):
        return False
    big = 1 << 30
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, big) and libc.mallopt(_M_TRIM_THRESHOLD, big))


def build_ops(codec_name: str, k: int, m: int, cs: int, seed: int) -> dict[str, Op]:
    """The timed operations for one codec: ``encode`` and ``decode`` (m data chunks lost)."""
    codec = get_codec(codec_name, k, m, cs)
    rng = np.random.default_rng(seed)
    buf = rng.integers(0, 256, size=k * cs, dtype=np.uint8)
    data = buf.reshape(k, cs)  # a submessage as the sender has it: k rows of one buffer
    parity = [np.empty(cs, dtype=np.uint8) for _ in range(m)]
    codec.encode(data, parity_out=parity)
    if codec_name == "xor":
        lost = sorted(int(g + m * rng.integers(0, math.ceil((k - g) / m))) for g in range(m))
    else:
        lost = sorted(rng.choice(k, size=m, replace=False).tolist())
    present = [i not in lost for i in range(k + m)]
    recv = buf.copy()
    slots = [recv[i * cs : (i + 1) * cs] for i in range(k)]
    chunks = [*slots, *parity]
    for i in lost:
        slots[i][:] = 0
    codec.decode(chunks, present)
    if not np.array_equal(recv, buf):
        raise SystemExit(f"{codec_name}: decode returned wrong bytes")
    return {
        "encode": lambda: codec.encode(data, parity_out=parity),
        "decode": lambda: codec.decode(chunks, present),
    }


def build_raw_pyeclib(k: int, m: int, cs: int, seed: int) -> dict[str, Op]:
    """The peer: pyeclib encode of the whole submessage and decode from k fragments."""
    driver = ECDriver(k=k, m=m, ec_type=DEFAULT_EC_TYPE)
    rng = np.random.default_rng(seed)
    buf = rng.integers(0, 256, size=k * cs, dtype=np.uint8)
    frags = driver.encode(buf)
    lost = set(rng.choice(k, size=m, replace=False).tolist())
    kept = [f for i, f in enumerate(frags) if i not in lost][:k]
    if driver.decode(kept) != buf.tobytes() or len(frags[0]) != HEADER_SIZE + cs:
        raise SystemExit("raw pyeclib: decode returned wrong bytes")
    return {"encode": lambda: driver.encode(buf), "decode": lambda: driver.decode(kept)}


def build_isal_direct(k: int, m: int, cs: int, seed: int) -> dict[str, Op]:
    """The floor: ISA-L's ec_encode_data called through ctypes on the buffers themselves.

    Uses the ISA-L that pyeclib's wheel bundles, a Cauchy matrix and no copies at all, i.e.
    what a C implementation of the scheme pays. Decode rebuilds ``m`` lost data chunks from
    ``k`` survivors (tables for the inverted matrix are built inside the timed call).
    """
    import pyeclib

    libdir = Path(pyeclib.__file__).resolve().parent.parent / "pyeclib.libs"
    libs = sorted(libdir.glob("libisal*"))
    if not libs:
        raise SystemExit("no ISA-L library next to pyeclib")
    isal = ctypes.CDLL(str(libs[0]))
    ptr = ctypes.c_void_p
    isal.ec_encode_data.argtypes = [ctypes.c_int] * 3 + [ptr] * 3
    isal.ec_init_tables.argtypes = [ctypes.c_int, ctypes.c_int, ptr, ptr]
    isal.gf_gen_cauchy1_matrix.argtypes = [ptr, ctypes.c_int, ctypes.c_int]
    isal.gf_invert_matrix.argtypes = [ptr, ptr, ctypes.c_int]

    def pointers(rows: list[np.ndarray]) -> ctypes.Array:
        return (ptr * len(rows))(*[r.ctypes.data for r in rows])

    n = k + m
    matrix = np.zeros((n, k), dtype=np.uint8)
    isal.gf_gen_cauchy1_matrix(matrix.ctypes.data, n, k)
    tables = np.zeros(32 * k * m, dtype=np.uint8)
    isal.ec_init_tables(k, m, matrix[k:].ctypes.data, tables.ctypes.data)
    rng = np.random.default_rng(seed)
    chunks = np.zeros((n, cs), dtype=np.uint8)
    chunks[:k] = rng.integers(0, 256, size=(k, cs), dtype=np.uint8)
    src, dst = pointers(list(chunks[:k])), pointers(list(chunks[k:]))
    enc_args = (cs, k, m, tables.ctypes.data, ctypes.addressof(src), ctypes.addressof(dst))
    isal.ec_encode_data(*enc_args)

    lost = sorted(rng.choice(k, size=m, replace=False).tolist())
    survivors = [i for i in range(n) if i not in lost][:k]
    inverse = np.zeros((k, k), dtype=np.uint8)
    square = matrix[survivors]  # a copy; it must outlive the call that reads its address
    if isal.gf_invert_matrix(square.ctypes.data, inverse.ctypes.data, k):
        raise SystemExit("ISA-L: singular decode matrix")
    rows = inverse[lost].copy()
    dec_tables = np.zeros(32 * k * m, dtype=np.uint8)
    rebuilt = np.zeros((m, cs), dtype=np.uint8)
    dsrc, ddst = pointers([chunks[i] for i in survivors]), pointers(list(rebuilt))
    dec_args = (cs, k, m, dec_tables.ctypes.data, ctypes.addressof(dsrc), ctypes.addressof(ddst))

    def decode() -> None:
        isal.ec_init_tables(k, m, rows.ctypes.data, dec_tables.ctypes.data)
        isal.ec_encode_data(*dec_args)

    decode()
    if not np.array_equal(rebuilt, chunks[lost]):
        raise SystemExit("ISA-L direct: decode returned wrong bytes")
    # ctypes sees only addresses: keep every buffer alive as long as the closures live.
    alive = (chunks, tables, src, dst, rows, dec_tables, rebuilt, dsrc, ddst)

    def encode() -> None:
        isal.ec_encode_data(*enc_args)

    encode.alive = decode.alive = alive  # type: ignore[attr-defined]
    return {"encode": encode, "decode": decode}


def ops_for(case: str, k: int, m: int, cs: int, seed: int) -> dict[str, Op]:
    if case == "pyeclib":
        return build_raw_pyeclib(k, m, cs, seed)
    if case == "isal":
        return build_isal_direct(k, m, cs, seed)
    return build_ops(case, k, m, cs, seed)


def time_op(op: Op, seconds: float) -> tuple[int, float]:
    """Run ``op`` for about ``seconds``; returns (calls, elapsed seconds)."""
    op()  # warm caches, allocator and templates
    calls, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        op()
        calls += 1
        now = time.perf_counter()
        if now >= deadline:
            return calls, now - start


def _worker(args: tuple) -> tuple[int, float]:
    case, op_name, k, m, cs, seed, seconds, barrier, malloc = args
    if malloc == "tuned":
        tune_malloc()
    op = ops_for(case, k, m, cs, seed)[op_name]
    op()
    barrier.wait()
    return time_op(op, seconds)


def parallel_mbps(case: str, op_name: str, procs: int, p: argparse.Namespace) -> float:
    """Aggregate MB/s of data of ``procs`` processes running the same operation at once."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(procs)
        jobs = [
            (case, op_name, p.k, p.m, p.chunk, p.seed + i, p.seconds, barrier, p.malloc)
            for i in range(procs)
        ]
        with ctx.Pool(procs) as pool:
            results = pool.map(_worker, jobs)
    total_bytes = sum(calls for calls, _ in results) * p.k * p.chunk
    return total_bytes / max(elapsed for _, elapsed in results) / 1e6


def machine() -> dict[str, object]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores_online": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pyeclib": metadata.version("pyeclib"),
        "ec_type": DEFAULT_EC_TYPE,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--m", type=int, default=8)
    ap.add_argument("--chunk", type=parse_size, default=parse_size("64KiB"))
    ap.add_argument("--reps", type=int, default=7, help="repetitions of each measurement")
    ap.add_argument("--seconds", type=float, default=0.25, help="time per repetition")
    ap.add_argument("--procs", default="1,2", help="process counts for the scaling runs")
    ap.add_argument("--rate", type=parse_rate, default=parse_rate("400Gbit/s"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("out/codecs.json"))
    ap.add_argument(
        "--malloc",
        choices=["default", "tuned"],
        default="default",
        help="tuned: glibc keeps freed memory (mallopt), so no page faults per call",
    )
    p = ap.parse_args(argv)
    if p.malloc == "tuned" and not tune_malloc():
        raise SystemExit("--malloc tuned needs glibc's mallopt")
    procs = [int(x) for x in p.procs.split(",") if x]
    submsg = p.k * p.chunk

    # Interleave the cases within each repetition so that drifts of the machine (frequency,
    # neighbours) hit every case alike and the ratios stay fair.
    ops = {
        f"{case} {name}": op
        for case in ("mds", "xor", "pyeclib", "isal")
        for name, op in ops_for(case, p.k, p.m, p.chunk, p.seed).items()
    }
    samples: dict[str, list[float]] = {key: [] for key in ops}
    for _ in range(p.reps):
        for key, op in ops.items():
            calls, elapsed = time_op(op, p.seconds)
            samples[key].append(calls * submsg / elapsed / 1e6)
    single = {
        key: {
            "median_MBps": statistics.median(mbps),
            "min_MBps": min(mbps),
            "max_MBps": max(mbps),
            "reps_MBps": mbps,
        }
        for key, mbps in samples.items()
    }

    scaling: dict[str, dict[int, float]] = {}
    for case in ("mds", "xor", "isal"):
        for name in ("encode", "decode"):
            scaling[f"{case} {name}"] = {
                n: statistics.median(parallel_mbps(case, name, n, p) for _ in range(3))
                for n in procs
            }

    data_Bps = p.rate / 8  # the link carries only data
    wire_data_Bps = data_Bps * p.k / (p.k + p.m)  # the link carries data and parity
    cores = {}
    n_max = max(procs)
    for key, row in scaling.items():
        per_core = row[n_max] / n_max * 1e6  # with all processes running: includes contention
        cores[key] = {
            "per_core_MBps": per_core / 1e6,
            "cores_for_data_rate": math.ceil(data_Bps / per_core),
            "cores_for_line_rate": math.ceil(wire_data_Bps / per_core),
        }

    print(
        f"(k, m) = ({p.k}, {p.m}), chunk {p.chunk} B, {p.reps} reps x {p.seconds} s, "
        f"one core, malloc {p.malloc}"
    )
    print(f"{'case':<18}{'median MB/s':>12}{'min':>9}{'max':>9}")
    for key, r in single.items():
        print(f"{key:<18}{r['median_MBps']:>12.0f}{r['min_MBps']:>9.0f}{r['max_MBps']:>9.0f}")
    for op in ("encode", "decode"):
        ratio = single[f"mds {op}"]["median_MBps"] / single[f"pyeclib {op}"]["median_MBps"]
        floor = single[f"mds {op}"]["median_MBps"] / single[f"isal {op}"]["median_MBps"]
        print(f"mds/pyeclib {op} ratio: {ratio:.2f}   mds/isal {op} ratio: {floor:.2f}")
    print(f"\nscaling (aggregate MB/s) over {procs} processes; cores for {p.rate / 1e9:g} Gbit/s")
    print(f"{'case':<14}" + "".join(f"{n:>9}p" for n in procs) + f"{'data':>8}{'line':>8}")
    for key, row in scaling.items():
        c = cores[key]
        cells = "".join(f"{row[n]:>10.0f}" for n in procs)
        print(f"{key:<14}{cells}{c['cores_for_data_rate']:>8}{c['cores_for_line_rate']:>8}")

    report = {
        "benchmark": "codecs",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "parameters": {
            "k": p.k,
            "m": p.m,
            "chunk_bytes": p.chunk,
            "reps": p.reps,
            "seconds_per_rep": p.seconds,
            "procs": procs,
            "rate_bits_per_s": p.rate,
            "seed": p.seed,
            "malloc": p.malloc,
            "decode_losses": {
                "mds": f"{p.m} random data chunks",
                "xor": "one data chunk per group",
            },
        },
        "results": {"single_core": single, "scaling_MBps": scaling, "cores_needed": cores},
    }
    p.out.parent.mkdir(parents=True, exist_ok=True)
    p.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {p.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
