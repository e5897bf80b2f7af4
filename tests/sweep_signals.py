"""A running ``sdr sweep`` caught part-way, so a signal meets it while it has rows left.

The process is paused (SIGSTOP) once its output holds some rows; a signal sent then stays
pending until SIGCONT, so it is delivered with rows still to evaluate whatever the machine's
speed: no race between the sweep's work and the test's signal.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

#: a grid far larger than the rows the tests wait for (800 points)
BIG_GRID = [
    "--sizes", "128KiB,256KiB,512KiB,1MiB,2MiB,4MiB,8MiB,16MiB",
    "--drops", "1e-5,1e-4,1e-3,1e-2,3e-2",
    "--rtts", "1ms,10ms,30ms,100ms,300ms",
    "--samples", "2000",
    "--executor", "serial",
]  # fmt: skip
BIG_GRID_POINTS = 8 * 5 * 5 * 4


def start_sweep(*args: str) -> subprocess.Popen:
    """``args`` (the ``sdr`` command line) started with SIGINT's default action, so Ctrl-C
    reaches it as it would from a terminal: a shell starts background jobs (``make test &``,
    ``nohup``) with SIGINT ignored, and a Python started so ignores it for good."""
    return subprocess.Popen(
        list(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _rows(path: Path) -> int:
    """Data rows in a CSV being written (header and a half-written last line not counted)."""
    try:
        return max(0, path.read_text().count("\n") - 1)
    except FileNotFoundError:
        return 0


def signal_part_way(
    proc: subprocess.Popen, path: Path, signum: int, *, rows: int = 3, total: int = 0
) -> int:
    """Pause ``proc`` once ``path`` holds ``rows`` rows, send ``signum``, resume it.

    Returns the rows ``path`` held while paused; asserts that the sweep had at least two
    points left then (so the signal cannot arrive after its last row).
    """
    deadline = time.monotonic() + 120  # a bound for a hung sweep, not a verdict on speed
    while _rows(path) < rows:
        assert proc.poll() is None, f"the sweep ended (rc {proc.returncode}) before {rows} rows"
        assert time.monotonic() < deadline, f"no {rows} rows within 120 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGSTOP)
    held = _rows(path)
    assert proc.poll() is None and held <= total - 2, (held, total)
    proc.send_signal(signum)
    proc.send_signal(signal.SIGCONT)
    return held
