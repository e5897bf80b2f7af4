"""SDR and kernel TCP at the same time through one emulated bottleneck (issue 21).

Every run gets its own TunLink (rate, RTT, a drop-tail buffer of ``--buffers`` BDPs,
random loss); SDR is the real ``sdr send``/``sdr recv`` pair in the two namespaces, TCP
is iperf3 with its congestion control set per socket. Scenarios (``--scenarios``):

  compete  one TCP flow (``--tcp``: CUBIC, BBR) starts; after ``--lead`` s one SDR flow
           (``--scheme``, each of ``--controllers``) joins; TCP runs until SDR is done
           plus ``--tail`` s. Per flow: throughput over the overlap (from ``--settle`` s
           after SDR joined to SDR's end); SDR's share / fair share = 2 S / (S + T)
           (target 0.5..2); the queueing delay: a small UDP probe every 10 ms from A to
           B, its one-way delay (CLOCK_MONOTONIC is shared by the namespaces) above the
           idle floor measured before the run, with TCP alone and with both flows.
  loss     SDR alone at random loss (``--losses``), each of ``--loss-controllers``,
           ``--repeats`` runs each: median completion vs ``fixed`` (target: ``delay``
           <= 1.05x); TCP CUBIC alone for reference (iperf3 for ``--tcp-seconds``: its
           goodput, and the time SIZE would take at it).
  pair     two SDR flows (each of ``--pair-controllers``), the second launched
           ``--pair-lead`` s after the first began (it joins after its own start-up,
           3-5 s here): Jain's index of their throughputs over the overlap.

A controller is a name with optional parameters for it (``congestion_params``), e.g.
``delay:target=5ms+ai=0.02``; they reach ``sdr send`` as a ``--config`` TOML file.
Needs root (namespaces, TUN).

    python -m benchmarks.congestion_emulated --json out/congestion_emulated.json \\
        --plot docs/figures/congestion_emulated.png
    python -m benchmarks.congestion_emulated --quick     # one small compete run, < 60 s

This file is the entry point; the pieces are in ``benchmarks/congestion_emulated_parts/``:
options (the command line), link (the TunLink and the delay probe), iperf (kernel TCP),
sdr_flow (``sdr send``/``sdr recv``), scenarios (the runs), metrics (the numbers, pure),
report (JSON and tables) and plot (the figure).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

if not __package__:  # run as a file (python benchmarks/congestion_emulated.py): find the parts
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from benchmarks.congestion_emulated_parts.iperf import (  # noqa: E402
    iperf_points,
    parse_iperf_interval,
)
from benchmarks.congestion_emulated_parts.metrics import (  # noqa: E402
    between,
    binned_median,
    binned_rate,
    compare_to_fixed,
    cumulative_at,
    jain,
    percentiles,
    rate_between,
    share_met,
    share_vs_fair,
    summarize_compete,
    summarize_loss,
    summarize_pair,
    window,
)
from benchmarks.congestion_emulated_parts.options import (  # noqa: E402
    ControllerSpec,
    Options,
    UsageError,
    parse_args,
    parse_controller,
)
from benchmarks.congestion_emulated_parts.plot import plot  # noqa: E402
from benchmarks.congestion_emulated_parts.report import (  # noqa: E402
    document,
    meta,
    print_results,
    write_json,
)
from benchmarks.congestion_emulated_parts.scenarios import run_all  # noqa: E402
from benchmarks.congestion_emulated_parts.sdr_flow import Workspace  # noqa: E402
from sdr.backends.wan import can_use_namespaces  # noqa: E402

__all__ = [
    "ControllerSpec",
    "Options",
    "UsageError",
    "Workspace",
    "between",
    "binned_median",
    "binned_rate",
    "compare_to_fixed",
    "cumulative_at",
    "document",
    "iperf_points",
    "jain",
    "main",
    "meta",
    "parse_args",
    "parse_controller",
    "parse_iperf_interval",
    "percentiles",
    "plot",
    "print_results",
    "rate_between",
    "run_all",
    "share_met",
    "share_vs_fair",
    "summarize_compete",
    "summarize_loss",
    "summarize_pair",
    "window",
    "write_json",
]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        raise SystemExit(f"congestion_emulated: error: {exc}") from None
    if reason := can_use_namespaces():
        raise SystemExit(f"congestion_emulated: cannot run: {reason}")
    if subprocess.run(["which", "iperf3"], capture_output=True).returncode:
        raise SystemExit("congestion_emulated: cannot run: iperf3 is not installed")
    load = os.getloadavg()
    console = Console(stderr=True)
    results = run_all(
        opts, lambda text: console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {text}")
    )
    doc = document(results, meta(opts, load))
    print_results(doc, opts)
    if opts.json:
        write_json(doc, opts.json)
    if opts.plot:
        plot(doc, opts.plot)
    return doc


if __name__ == "__main__":
    main()
