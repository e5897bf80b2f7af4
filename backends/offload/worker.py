"""The worker process: polls the packet sources of the channels it serves.

A worker maps the shared segments it is told about, owns one packet source and one
:class:`~sdr.backends.offload.engine.ChannelEngine` per (QP, channel) assigned to it, and
loops: wait until a source or the command pipe is readable, then drain every ready
source into its engine. Commands arrive on a ``multiprocessing`` pipe and each gets one
reply, so the application can treat them as calls:

  ("segment", id, name, size)   map a registered-memory segment
  ("drop_segment", id)          unmap it
  ("attach", qp, name, layout, [(channel, source_spec), ...]) -> {channel: address}
  ("detach", qp)                close that QP's sources and mapping
  ("fence",)                    reply once every packet taken so far has been written
  ("stats",) -> {"packets": n}  packets taken since start
  ("stop",)                     release everything and exit

Replies are ``("ok", value)`` or ``("error", text)``. A fence works because a worker
finishes each packet before it reads the pipe again: after the reply, no packet resolved
against an older key table is still being written.
"""

from __future__ import annotations

import mmap
import select
import sys
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from sdr.backends.offload.engine import ChannelEngine, drain
from sdr.backends.offload.shared_state import QPLayout, QPShared, attach_segment
from sdr.backends.offload.wire import PacketSource, make_source

if TYPE_CHECKING:
    from _typeshed import HasFileno

__all__ = ["worker_main"]

_BATCH = 256
_IDLE_S = 0.05
_RING_FULL_S = 0.0005


class _Worker:
    def __init__(self) -> None:
        self.maps: dict[int, mmap.mmap] = {}
        self.segments: dict[int, memoryview] = {}
        self.qps: dict[int, tuple[mmap.mmap, QPShared, list[tuple[ChannelEngine, PacketSource]]]]
        self.qps = {}
        self.packets = 0

    def command(self, msg: tuple[Any, ...]) -> Any:
        kind = msg[0]
        if kind == "segment":
            _, seg, name, size = msg
            self.maps[seg] = attach_segment(name, size)
            self.segments[seg] = memoryview(self.maps[seg])
            return "ok"
        if kind == "drop_segment":
            self._drop_segment(msg[1])
            return "ok"
        if kind == "attach":
            _, qp, name, layout, channels = msg
            lay = QPLayout(**layout)
            sources: list[PacketSource] = []
            try:
                for _, spec in channels:
                    sources.append(make_source(spec))
                mapping = attach_segment(name, lay.nbytes)
            except BaseException:
                for source in sources:
                    source.close()
                raise
            shared = QPShared(mapping, lay)
            pairs = [
                (ChannelEngine(shared, ch, self.segments), src)
                for (ch, _), src in zip(channels, sources, strict=True)
            ]
            self.qps[qp] = (mapping, shared, pairs)
            return {ch: src.address() for (ch, _), (_, src) in zip(channels, pairs, strict=True)}
        if kind == "detach":
            self._detach(msg[1])
            return "ok"
        if kind == "fence":
            return "ok"
        if kind == "stats":
            return {"packets": self.packets}
        if kind == "stop":
            for qp in list(self.qps):
                self._detach(qp)
            for seg in list(self.segments):
                self._drop_segment(seg)
            return "ok"
        return f"unknown command {kind!r}"

    def _drop_segment(self, seg: int) -> None:
        view = self.segments.pop(seg, None)
        if view is not None:
            view.release()
            self.maps.pop(seg).close()

    def _detach(self, qp: int) -> None:
        entry = self.qps.pop(qp, None)
        if entry is None:
            return
        mapping, shared, pairs = entry
        for _, source in pairs:
            source.close()
        pairs.clear()
        shared.release()
        mapping.close()

    def poll_once(self, conn: Connection) -> bool:
        """One round; False once the application asked to stop or went away."""
        pairs = [p for _, _, ps in self.qps.values() for p in ps]
        waiting = [src for eng, src in pairs if src.fileno() >= 0 and eng.room() > 0]
        busy = any(src.fileno() < 0 for _, src in pairs)
        full = any(eng.room() == 0 for eng, _ in pairs)
        timeout = 0.0 if busy else (_RING_FULL_S if full else _IDLE_S)
        try:
            watch: list[HasFileno] = [conn, *waiting]
            readable, _, _ = select.select(watch, [], [], timeout)
        except (OSError, ValueError):
            readable = [conn]
        if conn in readable:
            while conn.poll():
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    return False
                try:
                    reply: tuple[str, Any] = ("ok", self.command(msg))
                except Exception as exc:  # reported to the caller, who raises it
                    reply = ("error", f"{type(exc).__name__}: {exc}")
                conn.send(reply)
                if msg[0] == "stop":
                    return False
            pairs = [p for _, _, ps in self.qps.values() for p in ps]
        ready = set(readable)
        for engine, source in pairs:
            if source.fileno() < 0 or source in ready:
                self.packets += drain(engine, source, _BATCH)
        return True


def worker_main(conn: Connection) -> None:
    """Entry point of a worker process (started by ``sdr.backends.offload.pool.WorkerPool``)."""
    worker = _Worker()
    try:
        while worker.poll_once(conn):
            pass
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        worker.command(("stop",))
        conn.close()


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])))
