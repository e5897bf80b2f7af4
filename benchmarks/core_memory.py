"""Memory of the SDR core: an idle QP and one with 16 posted 64 MiB receives.

Per-QP state must grow with what is posted, not with the limits (1024 messages of up to
1 GiB must not allocate per-packet bitmaps up front). Receive buffers are allocated
before measuring: only the SDK's own state is counted (tracemalloc, NumPy included).

    python benchmarks/core_memory.py [--json out/core_memory.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tracemalloc

import numpy as np
from rich.console import Console
from rich.table import Table

import sdr
from sdr.backends.inproc import InprocNetwork
from sdr.units import format_size


def measure(attr: sdr.QPAttr, posts: int, size: int) -> int:
    net = InprocNetwork()
    buffers = [np.zeros(size, dtype=np.uint8) for _ in range(posts)]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    a, b = sdr.Context("inproc", network=net), sdr.Context("inproc", network=net)
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    handles = [qb.post_recv(b.register(buf)) for buf in buffers]
    b.progress()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert len(handles) == posts
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    big = sdr.QPAttr(max_message_size="1GiB", max_messages=1024)
    cases = [
        ("idle QP pair, 1024 x 1 GiB limits", big, 0, 0),
        ("16 posted receives of 64 MiB", big, 16, 64 << 20),
        ("128 posted receives of 8 MiB (paper's perftest)", big, 128, 8 << 20),
    ]
    results = []
    table = Table(title="SDR core memory (tracemalloc, buffers excluded)")
    for column in ("case", "SDK state", "per receive"):
        table.add_column(column)
    for name, attr, posts, size in cases:
        nbytes = measure(attr, posts, size)
        per = (nbytes - results[0]["bytes"]) / posts if posts and results else None
        results.append({"case": name, "posts": posts, "size": size, "bytes": nbytes})
        table.add_row(name, format_size(nbytes), format_size(per) if per else "-")
    Console().print(table)
    if args.json:
        meta = {"python": sys.version.split()[0], "numpy": np.__version__,
                "machine": platform.machine(), "command": " ".join(sys.argv)}  # fmt: skip
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
