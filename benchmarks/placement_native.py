"""The receive step, Python reference vs native: ns per packet and GB/s placed.

    python benchmarks/placement_native.py [--batches 64,256,4096] [--sizes 1024,4096,8192]
                                          [--repeat 7] [--json out.json]

Each round opens one bound message (its packet bytes and counts cleared) and places a
batch of full-MTU packets from one staging buffer (the UDP receive path's form), in
order, into a registered region: rules 1-8, the copy, the packet bytes, the chunk
counts. Both implementations run in the same process on the same batch; the figure is
the median of ``--repeat`` rounds (process CPU time), and the ratio is reference/native.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdr  # noqa: E402
from sdr.placement import (  # noqa: E402
    PLACED,
    PlacementGeometry,
    PlacementTable,
    place_batch_native,
    place_batch_python,
)
from sdr.transport import Bind  # noqa: E402


def _case(batch: int, mtu: int) -> tuple[PlacementTable, Bind, tuple, int]:
    attr = sdr.QPAttr(mtu=mtu, chunk_size=mtu * 16, max_message_size=batch * mtu, max_messages=2)
    g = PlacementGeometry.from_attr(attr)
    region = sdr.MemoryRegion(key=0, view=memoryview(np.zeros(batch * mtu, dtype=np.uint8)))
    binding = Bind(generation=0, slot=0, region=region, offset=0, length=batch * mtu, msg_id=0)
    table = PlacementTable(g)
    pkt = np.arange(batch, dtype=np.int64)
    staging = memoryview(np.random.default_rng(1).integers(0, 256, batch * mtu, np.uint8))
    args = (
        np.zeros(batch, np.int64),
        pkt * mtu,
        np.array([attr.layout.encode(0, int(p), 0) for p in pkt], np.uint32),
        np.full(batch, mtu, np.int64),
        staging,
        pkt * mtu,
    )
    return table, binding, args, batch * mtu


def _time(fn, table: PlacementTable, binding: Bind, args: tuple, repeat: int) -> float:
    rounds = []
    for _ in range(repeat):
        inner = max(1, 20000 // len(args[0]))
        total = 0.0
        for _ in range(inner):
            table.bind(binding, 0)  # region 0; the guard opened again
            start = time.process_time()
            verdicts = fn(table, *args)
            total += time.process_time() - start
        assert (verdicts == PLACED).all()
        rounds.append(total / inner)
    return statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="64,256,4096")
    ap.add_argument("--sizes", default="1024,4096,8192")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if place_batch_native is None:
        sys.exit("sdr._placement is not built: nothing to compare")
    rows = []
    print(f"{'batch':>6} {'size':>6} {'python ns/pkt':>14} {'native ns/pkt':>14} "
          f"{'python GB/s':>12} {'native GB/s':>12} {'ratio':>7}")  # fmt: skip
    for batch in [int(b) for b in args.batches.split(",")]:
        for size in [int(s) for s in args.sizes.split(",")]:
            table, binding, batch_args, nbytes = _case(batch, size)
            py = _time(place_batch_python, table, binding, batch_args, args.repeat)
            nat = _time(place_batch_native, table, binding, batch_args, args.repeat)
            row = {"batch": batch, "size": size, "python_ns_per_packet": py / batch * 1e9,
                   "native_ns_per_packet": nat / batch * 1e9, "python_gbps": nbytes / py / 1e9,
                   "native_gbps": nbytes / nat / 1e9, "ratio": py / nat}  # fmt: skip
            rows.append(row)
            print(f"{batch:>6} {size:>6} {row['python_ns_per_packet']:>14.0f} "
                  f"{row['native_ns_per_packet']:>14.0f} {row['python_gbps']:>12.2f} "
                  f"{row['native_gbps']:>12.2f} {row['ratio']:>6.1f}x")  # fmt: skip
    if args.json:
        doc = {"command": " ".join(sys.argv), "parameters": vars(args), "results": rows,
               "machine": {"platform": platform.platform(), "python": platform.python_version(),
                           "numpy": np.__version__}}  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
