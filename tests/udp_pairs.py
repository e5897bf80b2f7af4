"""Helpers for UDP tests: two contexts on loopback with one QP each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sdr
from sdr.backends.udp import UdpTransport


class UdpPair:
    """Contexts ``a`` and ``b`` over UDP transports ``ta``/``tb`` (seeds 1 and 2) on
    loopback, with QPs ``qa``/``qb`` of ``attr``, connected unless ``connect`` is false.

    ``socket_buffer`` goes to both transports; ``b_options`` to ``tb`` only (e.g.
    ``verify_icrc=False``). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        attr: sdr.QPAttr,
        *,
        connect: bool = True,
        socket_buffer: int | None = None,
        **b_options: Any,
    ) -> None:
        common = {} if socket_buffer is None else {"socket_buffer": socket_buffer}
        self.ta = UdpTransport(port=0, seed=1, **common)
        self.tb = UdpTransport(port=0, seed=2, **common, **b_options)
        self.a, self.b = sdr.Context(backend=self.ta), sdr.Context(backend=self.tb)
        self.qa, self.qb = self.a.create_qp(attr), self.b.create_qp(attr)
        if connect:
            self.connect()

    def connect(self) -> None:
        """Connect ``qa`` and ``qb`` to each other."""
        self.qa.connect(self.qb.info())
        self.qb.connect(self.qa.info())

    def settle(self, rounds: int = 50) -> None:
        """Progress both sides a fixed number of rounds."""
        for _ in range(rounds):
            self.a.progress()
            self.b.progress()

    def until(self, cond: Callable[[], bool], rounds: int = 200_000) -> None:
        """Progress both sides until ``cond()`` holds (AssertionError after ``rounds``)."""
        for _ in range(rounds):
            if cond():
                return
            self.a.progress()
            self.b.progress()
        raise AssertionError("condition not reached")

    def close(self) -> None:
        self.a.close()
        self.b.close()

    def __enter__(self) -> UdpPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
