"""The one interpreter of lowered ops: what it refuses on a port channel, and unknown ops.

A port channel (SDR writes between datacenters) maps no peer memory, so a ``get``, an LL
packet put or a read of the peer's scratch on it is a plan error, not a silent plain put;
an op kind the interpreter does not know fails instead of being skipped."""

from __future__ import annotations

import numpy as np
import pytest

from sdr.backends.collectives import OpInterpreter
from sdr.backends.collectives.layout import LoweredOp, Span
from sdr.errors import ConfigError


class _Port:
    """A port channel that records what it was asked to do."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def put(self, dst_offset: int, src: np.ndarray, src_offset: int, nbytes: int) -> None:
        self.calls.append(("put", dst_offset, bytes(src[src_offset : src_offset + nbytes])))

    def signal(self) -> None:
        self.calls.append(("signal",))

    def wait(self, timeout: float | None = None) -> None:
        self.calls.append(("wait", timeout))

    def flush(self) -> None:
        self.calls.append(("flush",))


def _buffers() -> dict[str, np.ndarray]:
    return {
        "input": np.arange(16, dtype=np.uint8),
        "output": np.zeros(16, np.uint8),
        "scratch": np.zeros(16, np.uint8),
    }


def test_a_port_channel_carries_puts_signals_waits_and_flushes() -> None:
    port = _Port()
    ops = [
        LoweredOp("put", 4, Span("scratch", 8), (Span("input", 2),), peer=1),
        LoweredOp("signal", peer=1),
        LoweredOp("wait", peer=1),
        LoweredOp("flush", peer=1),
        LoweredOp("barrier"),
    ]
    OpInterpreter(0, port={1: port}, unit="datacenter").run(ops, _buffers(), "float32", timeout=3.0)
    assert port.calls == [("put", 8, bytes([2, 3, 4, 5])), ("signal",), ("wait", 3.0), ("flush",)]


@pytest.mark.parametrize(
    ("op", "what"),
    [
        (LoweredOp("get", 4, Span("output", 0), (Span("scratch", 0),), peer=1), "cannot get"),
        (
            LoweredOp("put", 4, Span("packets", 0), (Span("input", 0),), peer=1),
            "cannot put LL packets",
        ),
        (
            LoweredOp("reduce", 4, Span("output", 0), (Span("input", 0), Span("scratch", 0, 1))),
            "cannot read its scratch",
        ),
    ],
)
def test_a_port_channel_refuses_what_needs_mapped_memory(op: LoweredOp, what: str) -> None:
    port = _Port()
    with pytest.raises(ConfigError, match=what):
        OpInterpreter(0, port={1: port}, unit="datacenter").run([op], _buffers(), "float32")
    assert port.calls == []  # nothing was sent in its place


def test_an_unknown_op_and_a_missing_channel_fail() -> None:
    with pytest.raises(ConfigError, match="unknown lowered op 'teleport'"):
        OpInterpreter(0).run([LoweredOp("teleport")], _buffers(), "float32")
    with pytest.raises(ConfigError, match="rank 0 has no channel to rank 2"):
        OpInterpreter(0).run([LoweredOp("signal", peer=2)], _buffers(), "float32")
