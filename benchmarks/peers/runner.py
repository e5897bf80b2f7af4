"""Run a receiver in namespace B and a sender in namespace A; return the completion time."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

from sdr.backends.wan import TunLink, netns_exec

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result line in output:\n{text[-2000:]}")


def run_pair(
    link: TunLink, module: str, recv_args: list[str], send_args: list[str], timeout: float = 300
) -> dict[str, Any]:
    """Start ``module recv`` in B, wait until ready, run ``module send`` in A."""
    py = [sys.executable, "-m", module]
    receiver = subprocess.Popen(
        netns_exec(link.ns_b, *py, "recv", *recv_args),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        ready = receiver.stdout.readline()
        if '"ready"' not in ready:
            raise RuntimeError(f"receiver failed to start: {ready}{receiver.stderr.read()}")  # type: ignore[union-attr]
        sender = subprocess.run(
            netns_exec(link.ns_a, *py, "send", *send_args),
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if sender.returncode:
            raise RuntimeError(f"sender failed: {sender.stderr[-2000:]}")
        out, err = receiver.communicate(timeout=timeout)
    finally:
        if receiver.poll() is None:
            receiver.kill()
    sent, got = _last_json(sender.stdout), _last_json(out)
    return {
        **sent,
        **{f"recv_{k}": v for k, v in got.items()},
        "seconds": got["end"] - sent["start"],
        "intact": got["sha256"] == sent["sha256"],
    }
