"""One real SDR file transfer between two processes across the emulated link.

The receiver (``sdr recv --json``) runs in namespace B, the sender (``sdr send --json``)
in namespace A; both are separate processes, so the transfer crosses real sockets, the
kernel's IP stack and the emulator's TUN devices. Completion is measured receiver-side:
from the sender's first write to the receiver's last verified byte (CLOCK_MONOTONIC is
shared by every process of one host, namespaces included).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sdr.backends.wan import TunLink, netns_exec
from sdr.backends.wan.multipath_link import MultiPathTunLink
from sdr.errors import TransportError

__all__ = ["make_payload", "transfer_over_link"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
"""The folder that holds the sdr package (the checkout, or site-packages): children
import sdr from there as this process did, and nothing inside the package shadows a
top-level module (with the package folder itself first, sdr/torch stood in for torch)."""
_PORT = 18515


def make_payload(path: pathlib.Path, size: int, seed: int = 0) -> pathlib.Path:
    """A file of ``size`` random bytes (incompressible, seeded)."""
    if not path.exists() or path.stat().st_size != size:
        rng = np.random.default_rng(seed)
        with open(path, "wb") as fh:
            for start in range(0, size, 1 << 24):
                fh.write(rng.integers(0, 256, min(1 << 24, size - start), dtype=np.uint8).tobytes())
    return path


def _cli(namespace: str, *args: str) -> list[str]:
    return netns_exec(namespace, sys.executable, "-m", "sdr.cli.main", *args)


def _spawn(command: list[str]) -> subprocess.Popen[str]:
    """Start one side of a transfer with its output captured as text."""
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def transfer_over_link(
    link: TunLink | MultiPathTunLink,
    source: pathlib.Path,
    out: pathlib.Path,
    send_args: list[str],
    progress: Callable[[int, int], None] | None = None,
    timeout: float = 300.0,
    recv_args: Sequence[str] = (),
) -> dict[str, Any]:
    """Send ``source`` from namespace A to ``out`` in B; returns the sender's report plus
    ``completion_s`` (receiver-side) and the receiver's report under ``receiver``.
    ``link``: a :class:`TunLink` or a :class:`MultiPathTunLink` (then pass ``recv_args``
    ``["--data-port", str(link.ports[0])]`` and ``send_args`` ``--paths``)."""
    receiver = _spawn(
        _cli(
            link.ns_b,
            "recv",
            "--out",
            str(out),
            "--bind",
            link.addr_b,
            "--port",
            str(_PORT),
            "--json",
            "--timeout",
            str(timeout),
            *recv_args,
        ),
    )
    try:
        assert receiver.stdout is not None
        first = receiver.stdout.readline()
        if "listening" not in first:
            raise TransportError(f"receiver did not start: {first}{receiver.stderr.read()}")  # type: ignore[union-attr]
        sender = _spawn(
            _cli(
                link.ns_a,
                "send",
                str(source),
                "--to",
                f"{link.addr_b}:{_PORT}",
                "--json",
                "--timeout",
                str(timeout),
                *send_args,
            ),
        )
        assert sender.stdout is not None
        report: dict[str, Any] = {}
        for line in sender.stdout:
            msg = json.loads(line)
            if "done" in msg and progress:
                progress(msg["done"], msg["total"])
            report = msg.get("report", report)
        if sender.wait(timeout) != 0 or not report:
            raise TransportError(
                f"sender failed: {sender.stderr.read()[-3000:]}"  # type: ignore[union-attr]
                f"{_receiver_error(receiver)}"
            )
        received: dict[str, Any] = {}
        for line in receiver.stdout:
            received = json.loads(line).get("report", received)
        if receiver.wait(timeout) != 0:
            raise TransportError(f"receiver failed: {receiver.stderr.read()[-3000:]}")  # type: ignore[union-attr]
    finally:
        for proc in (receiver, locals().get("sender")):
            if proc is not None and proc.poll() is None:
                proc.kill()
    report["completion_s"] = report["recv_end"] - report["start"]
    report["receiver"] = received
    return report


def _receiver_error(receiver: subprocess.Popen[str], wait_s: float = 5.0) -> str:
    """The receiver's own error, when the sender failed (it says why it gave a message up)."""
    try:
        receiver.wait(wait_s)
    except subprocess.TimeoutExpired:
        return ""
    err = receiver.stderr.read()[-3000:].strip()  # type: ignore[union-attr]
    return f"; receiver: {err}" if err else ""
