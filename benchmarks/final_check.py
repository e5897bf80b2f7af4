"""What the receiver's final check costs: every chunk's CRC-32 once more before a message
is declared final (sdr/reliability/sr_receiver.py, ``final_check``).

The check reads the whole message once. Reported per size: GB/s of the check, of a plain
memory copy of the same bytes on the same core (the floor any pass over the bytes pays),
and the time the check adds against the message's time on the wire at 10, 100 and
400 Gbit/s.

    python benchmarks/final_check.py [--sizes 1MiB 64MiB 256MiB] [--repeat 5] [--json F]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import zlib

import numpy as np
from rich.console import Console
from rich.table import Table

from sdr.reliability.geometry import MessageGeometry
from sdr.reliability.integrity import DigestStore
from sdr.units import format_size, parse_size

RATES = (10e9, 100e9, 400e9)


def _best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(size: int, chunk: int, repeat: int) -> dict[str, float]:
    data = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
    geometry = MessageGeometry(size, chunk)
    store = DigestStore(geometry, 0, "bench")
    chunks = np.arange(geometry.n_chunks, dtype=np.int64)
    view = memoryview(data)
    store.crcs[:] = [zlib.crc32(view[a:b]) for a, b in map(geometry.bounds, range(len(chunks)))]
    store.known[:] = True
    assert store.check(view, chunks).all()
    check = _best(lambda: store.check(view, chunks), repeat)
    scratch = np.empty_like(data)
    copy = _best(lambda: np.copyto(scratch, data), repeat)
    row = {"size": size, "chunk": chunk, "check_gbps": size / check / 1e9}
    row["copy_gbps"] = size / copy / 1e9
    for rate in RATES:
        row[f"added_at_{int(rate / 1e9)}g"] = check / (size * 8 / rate)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1MiB", "64MiB", "256MiB"])
    parser.add_argument("--chunk", default="64KiB")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args(argv)
    chunk = parse_size(args.chunk)
    rows = [measure(parse_size(s), chunk, args.repeat) for s in args.sizes]
    table = Table(title=f"Final check: CRC-32 of every {format_size(chunk)} chunk once more")
    for name in ("message", "check GB/s", "memcpy GB/s", "+time at 10G", "at 100G", "at 400G"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(
            format_size(r["size"]),
            f"{r['check_gbps']:.2f}",
            f"{r['copy_gbps']:.2f}",
            *(f"{r[f'added_at_{int(g / 1e9)}g']:.1%}" for g in RATES),
        )
    Console().print(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "command": "python benchmarks/final_check.py " + " ".join(argv or sys.argv[1:]),
                    "machine": {"platform": platform.platform(), "python": sys.version.split()[0]},
                    "results": rows,
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
