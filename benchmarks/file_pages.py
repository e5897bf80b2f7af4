"""What writing a received file costs in CPU, apart from any transport: two ways to fill
its pages, and how much it matters what the memory did just before.

``ways``: ``--size`` bytes into a new file in ``--dir`` (default /dev/shm), by
(a) ``posix_fallocate`` + a shared mapping populated with ``MADV_POPULATE_WRITE`` +
a copy into it + ``munmap`` (how ``sdr recv`` received into its output before its ring)
and (b) ``pwrite`` from one reused 8 MiB buffer (how the ring writes, and how iperf3 -F
writes), one right after the other, ``--repeat`` times; CPU s per GiB of each step.

``temperature``: the same ``pwrite`` of a new file ``--waits`` seconds after the last
one was deleted. Where a VM's balloon reports free pages to its host, a page freed a
moment ago is still backed and one freed some seconds ago may not be: the host takes
reported pages back as it sees fit, and the next first touch then faults in the host
(docs/benchmarks.md, "Issue 35, round 16"); ``benchmarks/cpu_per_byte.py --settle``
starts every file receiver after the same wait.

    python benchmarks/file_pages.py [--size 2GiB] [--dir /dev/shm] [--repeat 2]
        [--waits 0,3,10,30] [--json out/file_pages.json]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sdr.backends.udp.sockets import prefault
from sdr.units import parse_size

GIB = 1 << 30
BLOCK = 8 << 20
STEP = 4 << 20  # populated per call, as the receiver's prefault thread does


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def fill(path: Path, size: int, way: str, block: bytes) -> dict[str, float]:
    """Write ``size`` bytes of ``block`` into the new file ``path`` by ``way`` (``mapping``
    or ``pwrite``); CPU s per GiB of each step, and of them all."""
    marks = [("start", _cpu())]
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if way == "mapping":
            os.posix_fallocate(fd, 0, size)
            marks.append(("fallocate", _cpu()))
            with mmap.mmap(fd, size) as area, memoryview(area) as view:
                for off in range(0, size, STEP):
                    with view[off : off + STEP] as step:
                        prefault(step)
                marks.append(("populate", _cpu()))
                for off in range(0, size, BLOCK):
                    view[off : off + BLOCK] = block[: min(BLOCK, size - off)]
                marks.append(("copy", _cpu()))
            marks.append(("munmap", _cpu()))
        else:
            for off in range(0, size, BLOCK):
                os.pwrite(fd, block[: min(BLOCK, size - off)], off)
            marks.append(("pwrite", _cpu()))
    finally:
        os.close(fd)
        path.unlink()
    gib = size / GIB
    steps = {name: (t - marks[i][1]) / gib for i, (name, t) in enumerate(marks[1:])}
    return {**steps, "total": (marks[-1][1] - marks[0][1]) / gib}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", default="2GiB")
    p.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else ".")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--waits", default="0,3,10,30", help="seconds after the last file went")
    p.add_argument("--json")
    args = p.parse_args(argv)
    size = parse_size(args.size)
    path = Path(args.dir) / f"sdr-file-pages-{os.getpid()}.bin"
    block = os.urandom(BLOCK)
    found: dict[str, Any] = {"ways": [], "temperature": []}
    print(f"{args.size} into {args.dir}, CPU s per GiB")
    for _ in range(args.repeat):
        for way in ("mapping", "pwrite"):
            steps = fill(path, size, way, block)
            found["ways"].append({"way": way, **steps})
            shown = "  ".join(f"{name} {value:.2f}" for name, value in steps.items())
            print(f"  {way:8s} {shown}", flush=True)
    fill(path, size, "pwrite", block)  # so the first wait starts from a file just deleted
    for wait in (float(w) for w in args.waits.split(",")):
        time.sleep(wait)
        total = fill(path, size, "pwrite", block)["total"]
        found["temperature"].append({"wait_s": wait, "pwrite": total})
        print(f"  pwrite {wait:g} s after the last file was deleted: {total:.2f}", flush=True)
    print(f"load average: {os.getloadavg()[0]:.2f}")
    if args.json:
        meta = {
            "command": " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, **found}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
