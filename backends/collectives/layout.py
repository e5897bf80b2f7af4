"""From chunks to bytes: the run-time layout of a plan and its lowered operations.

Every executor (shared memory, SDR port channels, GPU) lowers a plan the same way, so a plan
means the same bytes everywhere:

- the *unit* (bytes of one chunk) is ``ceil(input_elements / input_chunks)`` elements;
- chunk ``i`` of a buffer covers ``[i * unit, (i + count) * unit)`` clipped to the buffer;
- an operation moves ``min`` of its references' lengths (so a short last chunk of
  ``input`` pairs with a full-size chunk of ``scratch``);
- ``packets`` hold LL packets: ``packet_bytes(n)`` bytes carry ``n`` data bytes, and chunk
  ``i`` of ``packets`` starts at ``i * packet_bytes(unit)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdr.collectives.plan import Op, Plan
from sdr.errors import ConfigError

#: Data bytes per LL packet and bytes per packet (two 32-bit data words, two 32-bit flags).
PACKET_DATA = 8
PACKET_SIZE = 16


def packet_bytes(nbytes: int) -> int:
    """Bytes of LL packets needed to carry ``nbytes`` of data."""
    return -(-nbytes // PACKET_DATA) * PACKET_SIZE


@dataclass(frozen=True)
class Layout:
    """Byte sizes of every buffer of one plan for one call shape."""

    unit: int
    input: int
    output: int
    scratch: int
    packets: int

    def size(self, buffer: str) -> int:
        """Bytes of ``buffer`` (for ``packets``: bytes of packet storage)."""
        return int(getattr(self, buffer))


def make_layout(plan: Plan, in_nbytes: int, out_nbytes: int, itemsize: int) -> Layout:
    """The layout of ``plan`` for an input of ``in_nbytes`` and output of ``out_nbytes``."""
    if in_nbytes % itemsize or out_nbytes % itemsize:
        raise ConfigError(f"buffer sizes {in_nbytes}, {out_nbytes} not multiples of {itemsize}")
    elems = in_nbytes // itemsize
    unit = -(-elems // plan.chunks["input"]) * itemsize
    return Layout(
        unit=unit,
        input=in_nbytes,
        output=out_nbytes,
        scratch=plan.chunks.get("scratch", 0) * unit,
        packets=plan.chunks.get("packets", 0) * packet_bytes(unit),
    )


@dataclass(frozen=True)
class Span:
    """Bytes of one buffer: ``peer`` is None for this rank's own buffer."""

    buffer: str
    offset: int
    peer: int | None = None


@dataclass(frozen=True)
class LoweredOp:
    """An operation in bytes: ``nbytes`` of data from ``srcs`` to ``dst``."""

    kind: str
    nbytes: int = 0
    dst: Span | None = None
    srcs: tuple[Span, ...] = ()
    peer: int | None = None


def _span(layout: Layout, buffer: str, index: int, count: int) -> tuple[int, int]:
    """(offset, data length) of a chunk reference; packets offsets are in packet bytes."""
    if buffer == "packets":
        return index * packet_bytes(layout.unit), count * layout.unit
    start = min(index * layout.unit, layout.size(buffer))
    end = min((index + count) * layout.unit, layout.size(buffer))
    return start, end - start


def lower(plan: Plan, rank: int, layout: Layout, in_place: bool = False) -> list[LoweredOp]:
    """The ops of ``rank`` in bytes; ops that move zero bytes are dropped.

    ``in_place``: the call's input and output start at one address (every broadcast; an
    allgather whose input is the first slice of its output), so a copy from the input to
    the same offset of the output moves nothing and is dropped too (a broadcast root's
    whole-buffer copy, for one).
    """
    out: list[LoweredOp] = []
    for op in plan.ranks[rank]:
        if op.kind in ("signal", "wait", "flush", "barrier"):
            out.append(LoweredOp(op.kind, peer=op.peer))
            continue
        lowered = _lower_data(op, layout)
        if lowered.nbytes > 0 and not (in_place and _self_copy(lowered)):
            out.append(lowered)
    return out


def _self_copy(op: LoweredOp) -> bool:
    return (
        op.kind == "copy"
        and op.dst is not None
        and op.dst.buffer == "output"
        and op.dst.peer is None
        and op.srcs == (Span("input", op.dst.offset, None),)
    )


def _lower_data(op: Op, layout: Layout) -> LoweredOp:
    assert op.dst is not None
    lengths = []
    dst_off, dst_len = _span(layout, op.dst.buffer, op.dst.index, op.dst.count)
    lengths.append(dst_len)
    srcs = []
    for ref in op.srcs:
        off, length = _span(layout, ref.buffer, ref.index, ref.count)
        lengths.append(length)
        owner = op.peer if op.kind == "get" else ref.rank
        srcs.append(Span(ref.buffer, off, owner))
    dst = Span(op.dst.buffer, dst_off, op.peer if op.kind == "put" else None)
    return LoweredOp(op.kind, min(lengths), dst, tuple(srcs), op.peer)
