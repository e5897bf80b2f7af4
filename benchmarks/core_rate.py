"""Packet rate of the sans-I/O core alone (no transport): how many packets per second the
sender can packetize and the receiver can validate and mark, by batch size.

    python benchmarks/core_rate.py
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

import sdr
from sdr.control import CTS, decode_cts
from sdr.transport import CompletionBatch


def run(batch: int, size: int = 64 << 20) -> tuple[float, float]:
    attr = sdr.QPAttr(max_message_size=size)
    tx, rx = sdr.QueuePairCore(attr), sdr.QueuePairCore(attr)
    mr = sdr.MemoryRegion(key=1, view=memoryview(bytearray(size)))
    rx.post_recv(0.0, mr)
    cts = next(a for a in rx.actions_to_do() if isinstance(a, sdr.actions.SendControl))
    tx.receive_control(0.0, cts.data)
    assert isinstance(decode_cts(cts.data), CTS)
    tx.post_send(0.0, mr)
    t0 = time.perf_counter()
    batches = []
    while True:
        out = tx.writes_to_send(0.0, batch)
        if not out:
            break
        batches.extend(out)
    t1 = time.perf_counter()
    for wb in batches:
        rx.receive_completions(0.0, CompletionBatch(
            wb.channels, np.full(len(wb), wb.generation, np.uint8), wb.imms, wb.lengths,
            wb.remote_offsets))  # fmt: skip
    t2 = time.perf_counter()
    n = size // attr.mtu
    assert rx.counters.packets_accepted == n
    return n / (t1 - t0), n / (t2 - t1)


def main() -> None:
    table = Table(title="SDR core packet rate, 64 MiB message at 4 KiB MTU (one core)")
    for column in ("batch (packets)", "send Mpkt/s", "receive Mpkt/s"):
        table.add_column(column, justify="right")
    for batch in (1, 16, 256, 4096):
        send, recv = run(batch)
        table.add_row(str(batch), f"{send / 1e6:.3f}", f"{recv / 1e6:.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
