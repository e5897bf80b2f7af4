"""The device context: one backend (transport), the QPs on it, and the progress loop.

All work happens inside :meth:`Context.progress` (CPU progress, no hidden threads); time is
read only through the driver (``transport.now()``)::

    ctx = sdr.Context(backend="inproc")
    qp = ctx.create_qp(sdr.QPAttr(mtu=4096, chunk_size="64KiB"))
    qp.connect(peer_info)            # bytes from the peer's qp.info(), exchanged out of band
    mr = ctx.register(numpy_array)
    rh = qp.post_recv(mr)            # rh.bitmap fills as chunks land
"""

from __future__ import annotations

from typing import Any

from sdr.auth import check_secret
from sdr.backend_registry import load_backend
from sdr.config import QPAttr
from sdr.errors import ConfigError, TimeoutError
from sdr.id_reuse import DESIGN_RTT, warn_if_short
from sdr.runtime.qp import QP
from sdr.transport import MemoryRegion, Transport

__all__ = ["Context"]

_IDLE_WAIT_S = 0.001


class Context:
    """A device context: one backend (transport) and the QPs created on it."""

    def __init__(
        self,
        backend: str | Transport = "inproc",
        *,
        secret: bytes | str | None = None,
        **attrs: Any,
    ) -> None:
        """``secret``: shared key that authenticates connection set-up (sdr/auth.py)."""
        self.secret = check_secret(secret)
        if isinstance(backend, Transport):
            if attrs:
                raise ConfigError("pass backend attributes to the Transport itself")
            self.transport = backend
        else:
            self.transport = load_backend(backend)(**attrs)
        self._qps: list[QP] = []

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> float:
        """The backend's clock (seconds)."""
        return self.transport.now()

    def register(self, buffer: object) -> MemoryRegion:
        """Register a writable buffer (NumPy array, bytearray, mmap ...) for SDR I/O."""
        return self.transport.register(buffer)

    def create_qp(self, attr: QPAttr | None = None) -> QP:
        """Create an SDR queue pair with these attributes (defaults: the paper's)."""
        attr = attr or QPAttr()
        # at the rate limit, one-chunk messages, the longest RTT of the design range
        warn_if_short(attr, DESIGN_RTT, attr.rate_limit)
        qp = QP(self, attr)
        self._qps.append(qp)
        return qp

    def progress(self) -> int:
        """Drive every QP once: receive, apply, send. Returns the units of work done."""
        return sum(qp.progress() for qp in self._qps)

    def wait_until(self, condition: Any, timeout: float | None, what: str) -> None:
        """Progress until ``condition()`` holds; sdr.TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else self.now() + timeout
        while not condition():
            if self.progress() == 0:
                if deadline is not None and self.now() >= deadline:
                    raise TimeoutError(f"{what} did not finish within {timeout} s")
                self.transport.wait(_IDLE_WAIT_S)

    def close(self) -> None:
        for qp in self._qps:
            qp.close()
        self._qps.clear()
        self.transport.close()
