"""The one host interpreter of lowered ops: what the collective drivers' executors share.

A rank's ops, lowered to bytes (:func:`~sdr.backends.collectives.layout.lower`), run in
order over its channels:

- ``put``, ``signal``, ``wait``, ``flush``: on either kind of channel;
- ``get``, a ``put`` into the peer's LL packets (``put_packets``) and reading a peer's
  scratch in place (a reduce source; :meth:`MappedChannel.read`): memory channels only,
  whose peer memory is mapped here;
- ``copy``, ``reduce``: NumPy on this rank's byte buffers; a reduction widens to float32
  and rounds back (bfloat16 through uint16 bit operations), so every host executor gives
  the same bits;
- ``barrier``: nothing (one worker per rank).

What differs between the executors is a parameter, not another copy of this loop:

- the channels: ``memory`` (``backends/shm``: peers' shared memory mapped here) and
  ``port`` (``backends/hierarchical``: SDR reliable writes between datacenters);
- ``buffers``: this rank's bytes of the call (the shm executor picks the scratch and
  packet halves of the call's parity);
- ``read_packets``: how this rank reads the LL packets peers wrote into its packet buffer
  (with the call's flag, timeout and early-exit ``check``); None where there are none;
- ``flag``: the LL packet flag of the call's puts; ``timeout``: handed to every ``wait``
  (None: each channel's own).

The GPU executor runs the same lowered ops in one kernel (``backends/gpu/kernels.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from sdr.backends.collectives.dtypes import from_f32, to_f32
from sdr.backends.collectives.interfaces import MappedChannel, PortChannel
from sdr.backends.collectives.layout import LoweredOp, Span
from sdr.errors import ConfigError

__all__ = ["OpInterpreter", "ReadPackets"]

ReadPackets = Callable[[int, int], Any]
"""``read_packets(offset, nbytes)``: wait for the LL packets at byte ``offset`` of this
rank's packet buffer that carry ``nbytes`` of data, and return those data bytes."""


def _dst(op: LoweredOp) -> Span:
    """The destination of a data op (lower() gives every put/get/copy/reduce one)."""
    if op.dst is None:
        raise ConfigError(f"lowered {op.kind} op has no destination")
    return op.dst


class OpInterpreter:
    """Runs lowered ops for rank ``rank`` over its ``memory`` and ``port`` channels (by
    peer); ``unit`` names ranks in errors (``"rank"``, ``"datacenter"``).

    The mappings are kept, not copied: a caller that adds or drops channels (the shm
    communicator re-registering its memory) changes what the next run sees.
    """

    def __init__(
        self,
        rank: int,
        *,
        memory: Mapping[int, MappedChannel] | None = None,
        port: Mapping[int, PortChannel] | None = None,
        unit: str = "rank",
    ) -> None:
        self.rank = rank
        self.memory: Mapping[int, MappedChannel] = {} if memory is None else memory
        self.port: Mapping[int, PortChannel] = {} if port is None else port
        self.unit = unit

    def run(
        self,
        ops: Iterable[LoweredOp],
        buffers: Mapping[str, np.ndarray],
        dtype: str,
        *,
        flag: int = 0,
        timeout: float | None = None,
        read_packets: ReadPackets | None = None,
    ) -> None:
        """Execute ``ops`` on this rank's byte ``buffers`` (``input``, ``output``,
        ``scratch``, maybe ``packets``) holding elements of ``dtype`` (see module docs)."""

        def read(span: Span, nbytes: int) -> np.ndarray:
            if span.peer is not None:  # a peer's scratch (reduce source)
                return self._mapped(span.peer, "read its scratch").read(span.offset, nbytes)
            if span.buffer == "packets":
                if read_packets is None:
                    raise ConfigError(f"{self.unit} {self.rank} has no LL packet buffer")
                return read_packets(span.offset, nbytes)
            return buffers[span.buffer][span.offset : span.offset + nbytes]

        for op in ops:
            kind = op.kind
            if kind == "put":
                dst = _dst(op)
                if dst.buffer == "packets":
                    mch = self._mapped(op.peer, "put LL packets")
                    mch.put_packets(dst.offset, read(op.srcs[0], op.nbytes), 0, op.nbytes, flag)
                else:
                    ch = self._channel(op.peer)
                    ch.put(dst.offset, read(op.srcs[0], op.nbytes), 0, op.nbytes)
            elif kind == "get":
                dst = _dst(op)
                mch = self._mapped(op.peer, "get")
                mch.get(buffers[dst.buffer], dst.offset, op.srcs[0].offset, op.nbytes)
            elif kind == "copy":
                data = read(op.srcs[0], op.nbytes)
                dst = _dst(op)
                buffers[dst.buffer][dst.offset : dst.offset + op.nbytes] = data
            elif kind == "reduce":
                acc = to_f32(read(op.srcs[0], op.nbytes), dtype).copy()
                for s in op.srcs[1:]:
                    acc += to_f32(read(s, op.nbytes), dtype)
                res = from_f32(acc, dtype).view(np.uint8)
                dst = _dst(op)
                buffers[dst.buffer][dst.offset : dst.offset + op.nbytes] = res
            elif kind == "signal":
                self._channel(op.peer).signal()
            elif kind == "wait":
                self._channel(op.peer).wait(timeout)
            elif kind == "flush":
                self._channel(op.peer).flush()
            elif kind != "barrier":  # barrier: one worker per rank, nothing to do
                raise ConfigError(f"unknown lowered op {kind!r}")

    def _channel(self, peer: int | None) -> MappedChannel | PortChannel:
        if peer is not None:
            if peer in self.memory:
                return self.memory[peer]
            if peer in self.port:
                return self.port[peer]
        raise ConfigError(f"{self.unit} {self.rank} has no channel to {self.unit} {peer}")

    def _mapped(self, peer: int | None, what: str) -> MappedChannel:
        """The memory channel to ``peer``: ``what`` needs the peer's memory mapped here."""
        if peer is not None and peer in self.memory:
            return self.memory[peer]
        if peer is not None and peer in self.port:
            raise ConfigError(
                f"{self.unit} {self.rank}: the port channel to {peer} cannot {what} "
                "(only memory channels map the peer's memory)"
            )
        raise ConfigError(f"{self.unit} {self.rank} has no channel to {self.unit} {peer}")
