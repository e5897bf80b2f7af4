"""Offload engine scaling: packet rate and goodput vs worker processes.

Each worker serves one channel of one QP bound to a receive of ``--message`` bytes and
runs the real per-packet receive work (key-table lookup, payload copy into shared memory,
packet byte and chunk count, completion record); the application drains the completion
rings, as ``poll_completions`` does. Two packet sources:

- ``synthetic``: each worker cycles through pre-built packets of its channel (no kernel):
  the engine's own rate, the analogue of DPA threads fed by the NIC;
- ``udp``: the real wire, one sender process per channel blasting UDP datagrams at the
  worker's socket (loopback). Counts only what was placed; ``sent`` shows the offered load.

A ``cpu`` row runs the same engine inline in the application (``progress="cpu"``, one
core, synthetic source) as the in-run baseline. Prints a table and writes JSON with the
machine, versions, command, parameters and results. Paper reference (BlueField-3 DPA,
SC'25): 11.6 / 22.9 / 42.9 / 70.5 Mpkt/s at 4 / 8 / 16 / 32 threads.

Every packet placed is a new one: each channel cycles through the packets of
``--slots-per-channel`` messages (its own slots, bound to a buffer of its own, so
workers never write the same cache lines; by default enough that a worker, stopped by a
full ring, does not lap the application), and the application reopens a slot's packet
bytes once the channel has moved on to the next slot, as a receiver posting the next
message into it would. (A packet byte already set is a duplicate and is never placed
again, so cycling one message would measure discards.)

``--datapath`` picks the workers' datapath (``SDR_DATAPATH``, inherited by the worker
processes): ``native`` takes staged batches (array header parse, ``sdr._placement``,
array record writes), ``python`` the per-packet reference. The one-core engine cost is
measured for both in every run.

    python benchmarks/offload_scaling.py --workers 1 2 4 8 16 --seconds 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import socket
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sdr  # noqa: E402
from sdr import placement  # noqa: E402
from sdr.backends.offload import OffloadTransport  # noqa: E402
from sdr.backends.offload.shared_state import QPLayout  # noqa: E402
from sdr.backends.offload.wire import encode_header  # noqa: E402
from sdr.transport import Bind  # noqa: E402

PAPER_MPPS = {4: 11.6, 8: 22.9, 16: 42.9, 32: 70.5}


def _packets(attr: sdr.QPAttr, length: int, channel: int, slot: int = 0) -> list[bytes]:
    """The packets of a ``length``-byte message bound at ``slot`` (msg id = slot,
    generation 0), every packet of it, carried on ``channel``."""
    lay, mtu = attr.layout, attr.mtu
    payload = bytes(range(256)) * (mtu // 256 + 1)
    base = slot * attr.max_message_size
    return [
        encode_header(0, channel, lay.encode(slot, p, p % 16), base + p * mtu)
        + payload[: min(mtu, length - p * mtu)]
        for p in range(-(-length // mtu))
    ]


def _channel_packets(attr: sdr.QPAttr, length: int, channel: int, per: int) -> list[bytes]:
    """A channel's cycle: the messages of its ``per`` slots, one after the other."""
    return [pkt for k in range(per) for pkt in _packets(attr, length, channel, channel * per + k)]


class _Reopener:
    """Reopens a slot once its channel has moved past it (the next receive posted there)."""

    def __init__(self, qp: Any, channels: int, per: int, slot_size: int, packets: int) -> None:
        self.qp, self.per, self.slot_size, self.packets = qp, per, slot_size, packets
        # Position in its cycle of each channel's last record; None until its first one
        # (a worker's cycle starts wherever it was when the slots were bound).
        self.current: list[int | None] = [None] * channels

    def saw(self, batch: Any) -> None:
        if not len(batch):
            return
        chans, first = np.unique(batch.channels, return_index=True)
        backwards = batch.channels[::-1]
        _, after = np.unique(backwards, return_index=True)  # each channel's last record
        rows = len(backwards) - 1 - after
        for ch, row, row0 in zip(chans.tolist(), rows.tolist(), first.tolist(), strict=True):
            slot = int(batch.remote_offsets[row]) // self.slot_size
            pos, cur = slot - ch * self.per, self.current[ch]
            if cur is None:
                cur = int(batch.remote_offsets[row0]) // self.slot_size - ch * self.per
            while cur != pos:  # every slot the channel finished since the last poll
                self.qp.reopen(0, ch * self.per + cur, 0, self.packets)
                cur = (cur + 1) % self.per
            self.current[ch] = pos


def _sender(address: tuple[str, int], packets: list[bytes], seconds: float, out: Any) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    sock.connect(address)
    send, sent, i, n = sock.send, 0, 0, len(packets)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(256):
            try:
                send(packets[i])
            except OSError:
                continue
            i = (i + 1) % n
            sent += 1
    out.put(sent)


def slots_per_channel(attr: sdr.QPAttr, length: int) -> int:
    """Enough slots per channel that a worker does not lap the application: it stops when
    its ring (``ring_capacity`` records) is full, and a slot is reopened once the
    application has read the first record after it; twice the ring leaves room for an
    application descheduled between reading a ring and reopening (``duplicates`` in the
    results count the packets a worker met before their slot was reopened)."""
    return 2 * -(-QPLayout.ring_capacity // -(-length // attr.mtu)) + 2


def measure(
    source: str, workers: int, attr: sdr.QPAttr, length: int, seconds: float, per: int = 0
) -> dict:
    """One point: ``workers`` processes (0: inline engine) for ``seconds`` after warm-up;
    each channel cycles through ``per`` slots (0: :func:`slots_per_channel`; fresh
    packets, see the module docstring)."""
    per = per or slots_per_channel(attr, length)
    channels = max(1, workers)
    attr = attr.replace(channels=channels, max_messages=channels * per)
    packets = [_channel_packets(attr, length, ch, per) for ch in range(channels)]
    spec = (lambda _a, ch: ("synthetic", packets[ch])) if source == "synthetic" else None
    progress = "cpu" if workers == 0 else "offload"
    transport = OffloadTransport(progress=progress, workers=max(1, workers), source=spec)
    senders: list[Any] = []
    try:
        qp = transport.create_qp(attr)
        buf = transport.alloc(length * channels)
        mr = transport.register(buf)
        for slot in range(channels * per):  # a channel's slots land in its own buffer
            offset = slot // per * length
            qp.bind(
                Bind(generation=0, slot=slot, region=mr, offset=offset, length=length, msg_id=slot)
            )
        reopen = _Reopener(qp, channels, per, attr.max_message_size, -(-length // attr.mtu))
        queue: Any = None
        if source == "udp":
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for ch in range(attr.channels):
                addr = tuple(qp.addresses[ch])
                proc = ctx.Process(target=_sender, args=(addr, packets[ch], seconds + 1.0, queue))
                proc.start()
                senders.append(proc)
        warm = time.monotonic() + 0.5
        while time.monotonic() < warm:
            reopen.saw(qp.poll_completions(1 << 16))
        before = qp.counters()
        got = placed = 0
        start = time.monotonic()
        end = start + seconds
        # Workers fill 8192-record rings; reading them every millisecond leaves the cores
        # to the workers. Inline (workers=0), the engine runs inside the poll: no pause.
        pause = 0.001 if workers else 0.0
        while time.monotonic() < end:
            batch = qp.poll_completions(1 << 16)
            reopen.saw(batch)
            got += len(batch)
            placed += int(batch.byte_lens.sum())
            if pause:
                time.sleep(pause)
        elapsed = time.monotonic() - start
        sent = sum(queue.get() for _ in senders) if senders else None
        after = qp.counters()
        late = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], int)}
    finally:
        for proc in senders:
            proc.join(10)
        transport.close()
    row = {
        "source": source,
        "workers": workers,
        "packets": got,
        "seconds": elapsed,
        "mpps": got / elapsed / 1e6,
        "mpps_per_worker": got / elapsed / 1e6 / max(1, workers),
        "gbit_s": placed * 8 / elapsed / 1e9,
        "discards": late,
    }
    if sent is not None:
        row["sent_total"] = sent
    return row


def engine_cost(attr: sdr.QPAttr, length: int, datapath: str, repeat: int = 100) -> float:
    """Microseconds of receive work per packet on one core, as a worker does it (``drain``
    of 256-packet batches from a synthetic source, every packet new, record ring read):
    the best of ``repeat`` short runs, under ``datapath``.

    The minimum is robust against other processes on a shared machine, unlike the rates.
    """
    from sdr.backends.offload.engine import ChannelEngine, drain
    from sdr.backends.offload.shared_state import CTL_WORDS, QPShared, layout_for
    from sdr.backends.offload.wire import SyntheticSource

    one = attr.replace(channels=1, max_messages=1)
    lay = layout_for(one)
    shared = QPShared(memoryview(bytearray(lay.nbytes)), lay)
    memory = bytearray(length)
    shared.write_entry(0, 0, 0, 0, length, 0)
    engine = ChannelEngine(shared, 0, {0: memoryview(memory)})
    packets = _packets(one, length, 0)[:1024]
    source = SyntheticSource(packets)
    ctl = shared.ctl

    def run() -> None:
        shared.reset_slot(0)  # a new message: every packet is placed
        for _ in range(len(packets) // 256):
            drain(engine, source, 256)
            ctl[CTL_WORDS // 2] = ctl[0]  # the application read the records

    previous = placement.use_datapath(datapath)
    try:
        run()
        placed = int(ctl[0])
        best = min(timeit.repeat(run, number=1, repeat=repeat))  # short runs: few preemptions
    finally:
        placement.use_datapath(previous)
    if placed != len(packets) // 256 * 256:
        raise RuntimeError(f"engine cost run placed {placed} of {len(packets)} packets")
    return best / (len(packets) // 256 * 256) * 1e6


def machine() -> dict[str, Any]:
    """Where this ran."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average": list(os.getloadavg()),  # other tenants' load skews a small machine
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument(
        "--udp-workers",
        type=int,
        nargs="+",
        help="worker counts of the udp source (default: --workers)",
    )
    ap.add_argument("--source", choices=["synthetic", "udp", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--mtu", type=int, default=4096)
    ap.add_argument("--message", type=int, default=4 << 20, help="receive size in bytes")
    ap.add_argument(
        "--slots-per-channel",
        type=int,
        default=0,
        help="messages each channel cycles through (default: enough that none is lapped)",
    )
    ap.add_argument("--datapath", choices=["native", "python"], default=placement.DATAPATH)
    ap.add_argument("--json", default="offload_scaling.json")
    args = ap.parse_args(argv)
    os.environ[placement.DATAPATH_ENV] = args.datapath  # the worker processes read it
    placement.use_datapath(args.datapath)
    attr = sdr.QPAttr(mtu=args.mtu, chunk_size=args.mtu, max_message_size=args.message,
                      max_messages=1, generations=1)  # fmt: skip
    sources = ["synthetic", "udp"] if args.source == "both" else [args.source]
    paths = ["python"] + (["native"] if placement.place_batch_native is not None else [])
    cost = {path: engine_cost(attr, args.message, path) for path in paths}
    for path, us in cost.items():
        print(f"engine ({path}): {us:.3f} us per packet on one core ({1 / us:.3f} Mpkt/s)")
    if "native" in cost:
        print(f"native / python engine speed: {cost['python'] / cost['native']:.1f}x")
    print(f"workers run the {args.datapath} datapath", flush=True)
    rows = []
    before = machine()
    for source in sources:
        counts = args.workers if source == "synthetic" else (args.udp_workers or args.workers)
        points = ([0] if source == "synthetic" else []) + counts
        for workers in points:
            row = measure(source, workers, attr, args.message, args.seconds,
                          args.slots_per_channel)  # fmt: skip
            rows.append(row)
            print(f"  {source:9} workers={workers:2d} {row['mpps']:7.3f} Mpkt/s "
                  f"(duplicates {row['discards'].get('duplicates', 0)})", flush=True)  # fmt: skip
    print_table(rows)
    report = {
        "benchmark": "offload_scaling",
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "parameters": vars(args),
        "machine": before,
        "load_average_after": list(os.getloadavg()),
        "paper_mpps": PAPER_MPPS,
        "datapath": args.datapath,
        "engine_us_per_packet": cost,
        "paper_mpps_per_thread": {n: v / n for n, v in PAPER_MPPS.items()},
        "results": rows,
    }
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    return 0


def print_table(rows: list[dict]) -> None:
    """The table: rate, goodput, speedup over 1 worker, rate per worker, and the paper's
    DPA rate (in all and per thread; a worker is compared with one DPA thread, whose
    rate is the paper's at 4 threads / 4 where the count is not one of the paper's)."""
    per_thread = PAPER_MPPS[4] / 4
    print(f"{'source':9} {'workers':>7} {'Mpkt/s':>8} {'Gbit/s':>8} {'x1 worker':>9} "
          f"{'per worker':>10} {'/DPA thread':>11} {'paper Mpkt/s':>12} "
          f"{'ours/paper':>10}")  # fmt: skip
    for source in dict.fromkeys(r["source"] for r in rows):
        mine = [r for r in rows if r["source"] == source]
        one = next((r["mpps"] for r in mine if r["workers"] == 1), None)
        for r in mine:
            n = r["workers"]
            paper = PAPER_MPPS.get(n)
            thread = paper / n if paper else per_thread
            label = "cpu" if n == 0 else str(n)
            speed = f"{r['mpps'] / one:9.2f}" if one else f"{'':9}"
            each = r["mpps"] / max(1, n)
            ref = f"{paper:12.1f} {r['mpps'] / paper:10.4f}" if paper else f"{'':12} {'':10}"
            print(f"{source:9} {label:>7} {r['mpps']:8.3f} {r['gbit_s']:8.2f} {speed} "
                  f"{each:10.3f} {each / thread:11.3f} {ref}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
