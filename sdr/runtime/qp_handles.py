"""Handles of plain SDR sends and receives: a receive's chunk bitmap, a send's progress.

A :class:`RecvHandle` is *arrived* when every chunk and the immediate landed, and
*released* once :meth:`RecvHandle.complete` gave its slot back (later packets are then
discarded). A :class:`SendHandle` is *sent* when its last packet was handed to the
transport: plain SDR is unreliable, so that says nothing about arrival (use a reliable QP
for that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sdr.chunk_bitmap import bitmap_chunk_expand
from sdr.recv_table import RecvRecord, RecvState
from sdr.send_table import SendRecord, SendState
from sdr.transport import MemoryRegion

if TYPE_CHECKING:
    from sdr.runtime.qp import QP

__all__ = ["RecvHandle", "SendHandle", "SendStream"]


class RecvHandle:
    """A posted receive: its chunk bitmap, immediate and completion."""

    def __init__(self, qp: QP, record: RecvRecord) -> None:
        self.qp = qp
        self.record = record

    @property
    def bitmap(self) -> np.ndarray:
        """Read-only chunk bitmap: one bool per chunk, True once all its packets arrived."""
        return self.record.bitmap.view()

    @property
    def imm(self) -> int | None:
        """The sender's 32-bit immediate; None until all its fragments arrived."""
        return self.record.imm

    @property
    def length(self) -> int:
        return self.record.length

    @property
    def arrived(self) -> bool:
        """Every chunk and the immediate have landed."""
        return self.record.arrived

    @property
    def released(self) -> bool:
        """:meth:`complete` gave the receive back: its packets are discarded from now on."""
        return self.record.state is RecvState.COMPLETED

    def poll(self) -> bool:
        """Progress once; True when every chunk and the immediate have arrived."""
        self.qp.ctx.progress()
        return self.record.arrived

    def wait(self, timeout: float | None = None) -> RecvHandle:
        """Progress until everything arrived (sdr.TimeoutError after ``timeout`` s)."""
        self.qp.ctx.wait_until(lambda: self.record.arrived, timeout, f"receive {self.record.seq}")
        return self

    def complete(self) -> None:
        """Release the receive (early completion allowed): later packets are discarded."""
        self.qp.release_recv(self.record)

    def seal(self, chunks: object) -> None:
        """Declare these chunks final (e.g. verified against a checksum): the driver refuses
        every later packet for them, so their bytes can no longer change."""
        self.qp.seal_chunks(self.record, chunks)

    def reopen(self, chunks: object) -> None:
        """These chunks failed a check: clear their bits and accept their packets again
        (a retransmission repairs them; the bits set again when it has landed)."""
        self.qp.reopen_chunks(self.record, chunks)

    def chunk_ranges(self, chunks: object) -> np.ndarray:
        """Byte ranges [start, stop) of chunk indices or a chunk mask (bitmap_chunk_expand)."""
        return bitmap_chunk_expand(chunks, self.qp.attr.chunk_size, self.record.length)

    def missing_chunks(self) -> np.ndarray:
        """Indices of chunks not yet arrived."""
        return self.record.bitmap.missing_chunks()


class _SendBase:
    def __init__(self, qp: QP, record: SendRecord) -> None:
        self.qp = qp
        self.record = record

    def _done(self) -> bool:
        if self.record.state is SendState.FAILED:
            assert self.record.error is not None
            raise self.record.error
        return self.record.done

    def poll(self) -> bool:
        """Progress once; True when every packet was handed to the transport.

        Raises the message's error if it failed (e.g. it does not fit the receive).
        """
        self.qp.ctx.progress()
        return self._done()

    @property
    def sent(self) -> bool:
        """Every packet was handed to the transport (not: arrived; plain SDR is unreliable)."""
        return self.record.done

    def wait(self, timeout: float | None = None) -> _SendBase:
        """Progress until *sent*: every packet handed to the transport (sdr.TimeoutError
        after ``timeout`` s). It says nothing about arrival: a reliable QP's handle does."""
        self.qp.ctx.wait_until(self._done, timeout, f"send {self.record.seq}")
        return self


class SendHandle(_SendBase):
    """A one-shot send."""


class SendStream(_SendBase):
    """A streaming send: ranges at any (MTU-aligned) remote offset, then end()."""

    def send(self, mr: MemoryRegion, src_offset: int, dst_offset: int, length: int) -> None:
        """Write mr[src_offset:+length] to remote bytes [dst_offset, dst_offset+length)."""
        self.qp.stream_send(self.record, mr, src_offset, dst_offset, length)

    def end(self) -> None:
        """No more ranges; the stream completes when what is queued is sent."""
        self.qp.stream_end(self.record)
