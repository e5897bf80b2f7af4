"""SDR in ``benchmarks.congestion_emulated``: the real ``sdr recv`` in namespace B and
``sdr send`` in A, the sender's progress timestamped as it comes; and the
:class:`Workspace` that holds the payloads and builds ``sdr send``'s options."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import threading
import time
from typing import Any

from benchmarks.congestion_emulated_parts.metrics import Points
from benchmarks.congestion_emulated_parts.options import ControllerSpec, Options
from benchmarks.peers.runner import _env  # PYTHONPATH = this checkout, as the peers run
from sdr.cli.wan_transfer import _cli, make_payload  # _cli: sdr.cli.main in a namespace

ROOT = pathlib.Path(__file__).resolve().parents[2]


class SdrFlow:
    """``sdr recv`` in B and ``sdr send`` in A on out-of-band ``port``; the sender's
    progress lines (bytes acknowledged) are timestamped as they arrive."""

    def __init__(
        self,
        link: Any,
        port: int,
        source: pathlib.Path,
        out: pathlib.Path,
        send_args: list[str],
        timeout: float,
    ) -> None:
        self.link, self.port, self.timeout = link, port, timeout
        self.progress: list[tuple[float, float]] = []
        self.report: dict[str, Any] = {}
        self.error: str | None = None
        self.launched = time.monotonic()
        self.started = threading.Event()
        """Set at the first progress line: the transfer began."""
        self.ended: float | None = None
        """When the sender's output ended (it exited): a failed run's end."""
        self.receiver = self._spawn(
            link.ns_b, "recv", "--out", str(out), "--bind", link.addr_b, "--port", str(port),
            "--json", "--timeout", f"{timeout:g}",
        )  # fmt: skip
        assert self.receiver.stdout is not None
        first = self.receiver.stdout.readline()
        if "listening" not in first:
            self.receiver.kill()
            assert self.receiver.stderr is not None
            raise RuntimeError(f"sdr recv did not start: {first}{self.receiver.stderr.read()}")
        self.sender = self._spawn(
            link.ns_a, "send", str(source), "--to", f"{link.addr_b}:{port}", "--json",
            "--timeout", f"{timeout:g}", *send_args,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._drain = threading.Thread(target=self._read_receiver, daemon=True)
        self._drain.start()

    def _read_receiver(self) -> None:
        assert self.receiver.stdout is not None
        for _ in self.receiver.stdout:  # progress lines: read so the pipe never fills
            pass

    @staticmethod
    def _spawn(namespace: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            _cli(namespace, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=ROOT,
        )

    def _read(self) -> None:
        assert self.sender.stdout is not None
        for line in self.sender.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "done" in msg:
                self.progress.append((time.monotonic(), float(msg["done"])))
                self.started.set()
            self.report = msg.get("report", self.report)
        self.ended = time.monotonic()
        self.started.set()

    def wait(self) -> None:
        """Wait for both sides; a failure is kept in :attr:`error` (the stderr's last line)."""
        try:
            rc = self.sender.wait(self.timeout + 30)
            self._reader.join(5)
            if rc != 0 or not self.report:
                assert self.sender.stderr is not None
                self.error = _last_line(self.sender.stderr.read()) or f"sdr send exited {rc}"
            self.receiver.wait(30)
        except subprocess.TimeoutExpired:
            self.error = "sdr send did not exit in time"
        finally:
            for proc in (self.sender, self.receiver):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)

    def span(self, t0: float) -> tuple[float, float]:
        """(start, end) relative to ``t0``: the sender's first write to the receiver's last
        verified byte, or the progress seen when it failed."""
        if self.report:
            return self.report["start"] - t0, self.report["recv_end"] - t0
        start = self.progress[0][0] if self.progress else self.launched
        return start - t0, (self.ended or start) - t0

    def points(self, t0: float) -> Points:
        start, _ = self.span(t0)
        return [(start, 0.0)] + [(t - t0, d) for t, d in self.progress if t - t0 >= start]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:400] if lines else ""


class Workspace:
    """Payload files and the controllers' config files, in one temporary folder."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.tmp = tmp

    def clean(self, text: str | None) -> str | None:
        """``text`` (an error line) without this run's temporary folder in it."""
        return None if text is None else text.replace(str(self.tmp), "<tmp>")

    def payload(self, size: int) -> pathlib.Path:
        return make_payload(self.tmp / f"payload-{size}.bin", size)

    def send_args(self, opts: Options, spec: ControllerSpec, loss: float) -> list[str]:
        """``sdr send``'s options for ``spec`` at ``loss`` (its parameters, and the
        global timeout, in a ``--config`` file here)."""
        args = [
            "--scheme", opts.scheme, "--rate", f"{opts.rate:g}bit/s", "--rtt", f"{opts.rtt:g}s",
            "--congestion", spec.name, "--loss", f"{max(loss, 1e-6):g}",
            "--message-size", str(opts.message_size), "--mtu", str(opts.mtu),
            "--chunk", str(opts.chunk),
        ]  # fmt: skip
        if text := spec.toml(opts.global_timeout):
            config = self.tmp / f"cc-{re.sub(r'[^A-Za-z0-9]+', '_', spec.label)}.toml"
            config.write_text(text)
            args += ["--config", str(config)]
        return args
