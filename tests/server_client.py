"""Run a CLI client against a CLI server that is still starting up (shared by tests)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def client_after_server(
    server: subprocess.Popen, run_client: Callable[[], subprocess.CompletedProcess]
) -> tuple[subprocess.CompletedProcess, str]:
    """Run the client until the server listens (a "cannot reach" refusal is retried for up
    to 60 s: slow imports on a busy machine), then wait for the server; both must exit 0.
    Returns the client's result and the server's stdout; the server never outlives this."""
    try:
        deadline = time.monotonic() + 60
        while True:
            client = run_client()
            refused = "cannot reach" in " ".join((client.stdout + client.stderr).split())
            if not refused or time.monotonic() > deadline or server.poll() is not None:
                break
            time.sleep(0.2)
        assert client.returncode == 0, client.stdout + client.stderr
        out, err = server.communicate(timeout=60)
        assert server.returncode == 0, out + err
    finally:
        if server.poll() is None:
            server.kill()
    return client, out
