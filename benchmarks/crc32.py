"""CRC-32 (the ICRC's polynomial) in GB/s on one core: the native datapath's
implementations against the ``isal`` package (ISA-L) and zlib, at packet and bulk sizes.

Each native implementation runs in its own process (``SDR_CRC`` picks it at import):
``vpclmul`` (AVX-512 VPCLMULQDQ folding), ``pclmul`` (SSE PCLMULQDQ folding), ``table``
(slicing-by-8, the portable fallback). A row per size; best of ``--repeat`` timings, each
over enough calls for ~0.2 s. Calls go through Python, so small sizes include ~0.1 us of
call overhead, as every Python caller pays.

    .venv/bin/python benchmarks/crc32.py [--sizes 4096,8192,32768,1048576] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zlib

_CHILD = """
import json, os, sys, time
from sdr.backends.udp import _datapath as d
sizes, repeat = json.loads(sys.argv[1]), int(sys.argv[2])
out = {"implementation": d.implementation(), "gbps": {}}
for n in sizes:
    data = os.urandom(n)
    calls = max(10, int(0.2e9 / max(n, 1) / 10))
    best = min(
        (lambda t: (sum(d.crc32(data) for _ in range(calls)), time.perf_counter() - t)[1])(
            time.perf_counter())
        for _ in range(repeat))
    out["gbps"][str(n)] = n * calls / best / 1e9
print(json.dumps(out))
"""


def _time(fn, data: bytes, repeat: int) -> float:
    calls = max(10, int(0.2e9 / max(len(data), 1) / 10))
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            fn(data)
        best = min(best, time.perf_counter() - t)
    return len(data) * calls / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="4096,8192,32768,1048576")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    columns: dict[str, dict[str, float]] = {}
    for choice in ("vpclmul", "pclmul", "table"):
        env = {**os.environ, "SDR_CRC": choice}
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(sizes), str(args.repeat)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        got = json.loads(proc.stdout)
        if got["implementation"] == choice:  # else the CPU lacks it
            columns[f"native {choice}"] = got["gbps"]
    try:
        from isal.isal_zlib import crc32 as isal_crc32

        columns["isal"] = {str(n): _time(isal_crc32, os.urandom(n), args.repeat) for n in sizes}
    except ImportError:
        print("note: the isal package is not installed; no ISA-L column")
    columns["zlib"] = {str(n): _time(zlib.crc32, os.urandom(n), args.repeat) for n in sizes}
    names = list(columns)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'bytes':>9} " + " ".join(f"{n:>15}" for n in names) + "   (GB/s, one core)")
    for n in sizes:
        print(f"{n:>9} " + " ".join(f"{columns[c][str(n)]:>15.1f}" for c in names))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "gbps": columns}, f, indent=2)


if __name__ == "__main__":
    main()
