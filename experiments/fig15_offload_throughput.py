"""Fig 15/16: offload (DPA-style workers) packet rate versus threads, goodput versus size.

The model's defaults are fitted to the paper's Fig 16 numbers; the figure shows the fit,
the 1-packet-chunk rate and the goodput curve whose knee is the 512 KiB re-post limit.

    .venv/bin/python experiments/fig15_offload_throughput.py --out out/figures
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from figure_common import parser, save, setup, write_rows

from sdr.simulator.offload import PAPER_FIG16, OffloadModel

THREADS = np.arange(1, 65)
SIZES = np.array([2**e for e in range(12, 25)])  # 4 KiB .. 16 MiB
GOODPUT_THREADS = [2, 4, 8, 20]


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write fig15_offload_throughput.{csv,png}; return headline numbers."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    out = setup(args)
    model = OffloadModel.paper_defaults()
    rows = []
    for n in THREADS:
        rows.append(
            {
                "threads": int(n),
                "mpps_64k_chunks": float(model.packet_rate(n, 16)) / 1e6,
                "mpps_1pkt_chunks": float(model.packet_rate(n, 1)) / 1e6,
                "paper_mpps": PAPER_FIG16.get(int(n), float("nan")) / 1e6,
            }
        )
    write_rows(rows, out / "fig15_offload_throughput.csv")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(THREADS, [r["mpps_64k_chunks"] for r in rows], label="model, 64 KiB chunks")
    a.plot(THREADS, [r["mpps_1pkt_chunks"] for r in rows], label="model, 1-packet chunks")
    a.scatter(
        list(PAPER_FIG16), [v / 1e6 for v in PAPER_FIG16.values()], color="k", label="paper Fig 16"
    )
    a.axhline(400e9 / (4096 * 8) / 1e6, color="grey", lw=0.5, ls="--", label="400 Gbit/s at 4 KiB")
    a.set_xlabel("worker threads", fontsize=8)
    a.set_ylabel("Mpkt/s", fontsize=8)
    a.legend(fontsize=7)
    for n in GOODPUT_THREADS:
        b.plot(SIZES, model.goodput_bps(SIZES, n) / 1e9, marker=".", label=f"{n} threads")
    b.set_xscale("log", base=2)
    b.set_xlabel("message size (bytes)", fontsize=8)
    b.set_ylabel("goodput (Gbit/s)", fontsize=8)
    b.legend(fontsize=7)
    save(fig, out / "fig15_offload_throughput.png")
    fit = model.packet_rate(np.array(list(PAPER_FIG16)), 16)
    err = np.max(np.abs(fit / np.array(list(PAPER_FIG16.values())) - 1))
    line = next(int(s) for s in SIZES if model.goodput_bps(s, 20) >= 400e9 * 0.999)
    return {
        "fig16_fit_max_rel_error": float(err),
        "threads_for_400g_at_4k_packets": model.threads_for_line_rate(),
        "line_rate_from_bytes_20_threads": line,
    }


if __name__ == "__main__":
    print(main())
