"""Backend ``verbs``: SDR over an RDMA NIC (RoCE or InfiniBand) with pyverbs.

Per SDR QP: ``channels x generations`` UC QPs, one CQ per channel (the paper's per-channel
completion queue and worker), one RDMA WRITE with immediate per packet. Receive side:
``bind`` registers an MR over the posted receive and the CTS carries its address and rkey
(:mod:`sdr.backends.verbs.remote_keys`); ``unbind`` deregisters it, so a late write meets an
invalid rkey and the UC responder drops it without a completion (the late-packet guard;
pyverbs exposes no null MR, see docs/backends.md). Receive WQEs are replenished as
completions consume them; ``poll_completions`` turns CQEs into rows (imm in host order,
remote offset -1: verbs completions do not carry it). Pacing: the software token bucket
always, plus the QP's hardware rate limit when the NIC accepts it. Control messages
travel over a UDP socket beside the RDMA path.
"""

from __future__ import annotations

import logging
import random
import select
import socket
import time
from typing import Any, ClassVar

import numpy as np

from sdr.backends.verbs.loader import Pyverbs, device_names, load_pyverbs
from sdr.backends.verbs.qp_states import (
    RATE_LIMIT_STEP,
    UC_STEPS,
    Endpoint,
    check_port_mtu,
    endpoint_from_info,
    gid_text,
    qp_attr_for,
    step_mask,
)
from sdr.backends.verbs.remote_keys import RemoteKey, RemoteKeys, frame, unframe
from sdr.backends.verbs.work_requests import completion_kind, imm_from_wire, recv_wr, write_with_imm
from sdr.config import QPAttr
from sdr.control import CTS_TYPE, decode_cts
from sdr.errors import (
    ConfigError,
    LocalProtocolError,
    ProtocolError,
    TransportError,
)
from sdr.pacing import TokenBucket
from sdr.peer_info import (
    check_keys,
    check_list,
    field_address,
    require_object,
)
from sdr.queue_pair import MAX_QUEUED_CONTROL
from sdr.transport import (
    MAX_CONTROL_SIZE,
    Bind,
    CompletionBatch,
    MemoryRegion,
    Transport,
    TransportQP,
    WriteBatch,
    as_byte_view,
)

__all__ = ["VerbsTransport", "VerbsQP"]

log = logging.getLogger(__name__)

RECV_DEPTH = 512
SEND_DEPTH = 512
SIGNAL_EVERY = 64
CONTROL_READS_PER_POLL = MAX_QUEUED_CONTROL
"""Most control datagrams one poll_control reads (the rest wait in the kernel's buffer)."""


def _address(view: memoryview) -> int:
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data) if len(view) else 0


class VerbsQP(TransportQP):
    """Transport side of one SDR QP on an RDMA device."""

    def __init__(self, transport: VerbsTransport, attr: QPAttr) -> None:
        pv, e = transport.pv, transport.pv.enums
        check_port_mtu(attr.mtu, transport.active_mtu, e)  # one SDR packet = one UC packet
        self.transport, self.attr, self.pv = transport, attr, pv
        self.pacer = TokenBucket(attr.rate_limit, max(attr.chunk_size, 16 * attr.mtu) * 8)
        self.keys = RemoteKeys(attr.max_message_size)
        self._bound: dict[tuple[int, int], tuple[Any, int, int]] = {}
        self._counters = {"wc_error": 0, "control_malformed": 0, "rate_limit_software": 0}
        self._inflight = [[0] * attr.channels for _ in range(attr.generations)]
        self._unsignaled = [[0] * attr.channels for _ in range(attr.generations)]
        self._posted_recv = [[0] * attr.channels for _ in range(attr.generations)]
        self._closed = False
        ctx = transport.ctx
        depth = attr.generations * (RECV_DEPTH + SEND_DEPTH)
        self.cqs = [pv.cq.CQ(ctx, depth, None, None, 0) for _ in range(attr.channels)]
        self.qps: list[list[Any]] = []
        for _gen in range(attr.generations):
            row = []
            for ch in range(attr.channels):
                cap = pv.qp.QPCap(
                    max_send_wr=SEND_DEPTH, max_recv_wr=RECV_DEPTH, max_send_sge=1, max_recv_sge=1
                )
                init = pv.qp.QPInitAttr(
                    qp_type=int(e.IBV_QPT_UC),
                    scq=self.cqs[ch],
                    rcq=self.cqs[ch],
                    cap=cap,
                    sq_sig_all=0,  # selective signaling: see post_writes
                )
                row.append(pv.qp.QP(transport.pd, init))
            self.qps.append(row)
        self.qpn = {qp.qp_num: (ch, gen) for gen, row in enumerate(self.qps) for ch, qp in
                    enumerate(row)}  # fmt: skip
        self.local = [
            [
                Endpoint(qp.qp_num, random.getrandbits(24), transport.lid, transport.gid)
                for qp in row
            ]
            for row in self.qps
        ]
        self.control = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.control.bind((transport.host, 0))
        self.control.setblocking(False)
        self._peer_control: tuple[str, int] | None = None

    # --- connection ---------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {
            "endpoints": [[[p.qpn, p.psn, p.lid, p.gid] for p in row] for row in self.local],
            "control": list(self.control.getsockname()),
        }

    def connect(self, remote: dict[str, Any]) -> None:
        path = "transport"
        info = require_object(remote, path)
        check_keys(info, path, ("endpoints", "control"))
        gens = check_list(info["endpoints"], f"{path}.endpoints", self.attr.generations)
        rows = []
        for gen, row in enumerate(gens):
            here = f"{path}.endpoints[{gen}]"
            entries = check_list(row, here, self.attr.channels)
            rows.append([endpoint_from_info(e, f"{here}[{ch}]") for ch, e in enumerate(entries)])
        # the default control host is 0.0.0.0 (the peer's own machine): not refused here
        host, port = field_address(info, "control", path=path, ipv4_only=True, unicast=False)
        t, pv = self.transport, self.pv
        rate_kbps = int(self.attr.rate_limit // 1000) if self.attr.rate_limit else 0
        for gen, row in enumerate(self.qps):
            for ch, qp in enumerate(row):
                for step in UC_STEPS:
                    attr = qp_attr_for(
                        pv, step, port=t.port, sgid_index=t.gid_index, mtu=self.attr.mtu,
                        local=self.local[gen][ch], remote=rows[gen][ch],
                    )  # fmt: skip
                    qp.modify(attr, step_mask(step, pv.enums))
                if rate_kbps:
                    self._hardware_rate(qp, rate_kbps)
                self._replenish(gen, ch)
        self._peer_control = (host, port)

    def _hardware_rate(self, qp: Any, kbps: int) -> None:
        t, pv = self.transport, self.pv
        attr = qp_attr_for(pv, RATE_LIMIT_STEP, port=t.port, sgid_index=t.gid_index,
                           mtu=self.attr.mtu, local=self.local[0][0], rate_kbps=kbps)  # fmt: skip
        try:
            qp.modify(attr, step_mask(RATE_LIMIT_STEP, pv.enums))
        except pv.pyverbs_error.PyverbsError as exc:
            self._counters["rate_limit_software"] = 1
            log.info("hardware rate limit refused (%s); pacing in software only", exc)

    def _replenish(self, gen: int, ch: int) -> None:
        missing = RECV_DEPTH - self._posted_recv[gen][ch]
        if missing < RECV_DEPTH // 2 and self._posted_recv[gen][ch]:
            return
        t, qp = self.transport, self.qps[gen][ch]
        for _ in range(missing):
            qp.post_recv(recv_wr(self.pv, gen << 16 | ch, t.scratch_addr, t.scratch.lkey))
        self._posted_recv[gen][ch] = RECV_DEPTH

    # --- key table ------------------------------------------------------------------------
    def bind(self, binding: Bind) -> None:
        binding.check(self.attr.max_message_size)
        self.unbind(binding.generation, binding.slot)
        addr = _address(binding.region.view) + binding.offset
        mr = None
        if binding.length:
            e = self.pv.enums
            access = int(e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
            mr = self.pv.mr.MR(self.transport.pd, binding.length, access, address=addr)
        self._bound[(binding.generation, binding.slot)] = (mr, addr, binding.length)

    def unbind(self, generation: int, slot: int) -> None:
        entry = self._bound.pop((generation, slot), None)
        if entry is not None and entry[0] is not None:
            entry[0].close()  # deregistered: the rkey is void, late writes are dropped

    # --- data path ------------------------------------------------------------------------
    def set_pacing_rate(self, now: float, bits_per_s: float) -> None:
        """The software pacer follows the controller (the QP's hardware rate limit, set
        at connect from ``rate_limit``, stays the ceiling)."""
        self.pacer.set_rate(now, bits_per_s)

    def send_budget(self, now: float) -> int:
        # a QP's sends are retired in groups of SIGNAL_EVERY (selective signaling)
        free = min(SEND_DEPTH - SIGNAL_EVERY - n for row in self._inflight for n in row)
        return max(0, min(self.pacer.budget(now, self.attr.mtu * 8), free))

    def post_writes(self, batch: WriteBatch) -> None:
        base, lkey = self.transport.lkey_of(batch.region)
        gen = batch.generation
        for ch, roff, imm, src, n in zip(
            batch.channels.tolist(),
            batch.remote_offsets.tolist(),
            batch.imms.tolist(),
            batch.src_offsets.tolist(),
            batch.lengths.tolist(),
            strict=True,
        ):
            remote_addr, rkey = self.keys.target(gen, roff, n)
            self._unsignaled[gen][ch] += 1
            signaled = self._unsignaled[gen][ch] == SIGNAL_EVERY
            if signaled:
                self._unsignaled[gen][ch] = 0
            wr = write_with_imm(self.pv, wr_id=gen << 16 | ch, addr=base + src, length=n,
                                lkey=lkey, remote_addr=remote_addr, rkey=rkey, imm=imm,
                                signaled=signaled)  # fmt: skip
            self.qps[gen][ch].post_send(wr)
            self._inflight[gen][ch] += 1
        self.pacer.consume(self.transport.now(), batch.payload_bytes * 8)

    def poll_completions(self, max_packets: int) -> CompletionBatch:
        rows: list[tuple[int, int, int, int, int]] = []
        for cq in self.cqs:
            left = max_packets - len(rows)
            if left <= 0:
                break
            _, wcs = cq.poll(min(left, 256))
            for wc in wcs:
                ch, gen = self.qpn.get(wc.qp_num, (-1, -1))
                kind = completion_kind(self.pv, wc)
                if kind == "data" and gen >= 0:
                    rows.append((ch, gen, imm_from_wire(wc.imm_data), wc.byte_len, -1))
                    self._posted_recv[gen][ch] -= 1
                    self._replenish(gen, ch)
                elif kind == "send" and gen >= 0:  # retires this and the unsignaled before
                    self._inflight[gen][ch] = max(0, self._inflight[gen][ch] - SIGNAL_EVERY)
                else:
                    self._counters["wc_error"] += 1
                    log.warning("verbs completion error on QP %s: %s", wc.qp_num, kind)
        return CompletionBatch.from_rows(rows)

    # --- control path ---------------------------------------------------------------------
    def send_control(self, data: bytes) -> None:
        if len(data) > MAX_CONTROL_SIZE:
            raise LocalProtocolError(f"control message of {len(data)} bytes > {MAX_CONTROL_SIZE}")
        if self._peer_control is None:
            raise TransportError("QP is not connected")
        key = None
        if data and data[0] == CTS_TYPE:
            cts = decode_cts(data)
            mr, addr, length = self._bound.get((cts.generation, cts.slot), (None, 0, 0))
            rkey = mr.rkey if mr is not None else 0
            key = RemoteKey(cts.generation, cts.slot, addr, rkey, length)
        self.control.sendto(frame(bytes(data), key), self._peer_control)

    def poll_control(self) -> list[bytes]:
        out = []
        for _ in range(CONTROL_READS_PER_POLL):
            try:
                datagram = self.control.recv(MAX_CONTROL_SIZE + 64)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                continue
            try:
                key, data = unframe(datagram)
            except ProtocolError:
                self._counters["control_malformed"] += 1
                continue
            if key is not None:
                if key.generation >= self.attr.generations or key.slot >= self.attr.max_messages:
                    self._counters["control_malformed"] += 1  # names no entry: not learned
                    continue
                self.keys.learn(key)
            out.append(data)
        return out

    def counters(self) -> dict[str, int]:
        return dict(self._counters)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for gen, slot in list(self._bound):
            self.unbind(gen, slot)
        for row in self.qps:
            for qp in row:
                qp.close()
        for cq in self.cqs:
            cq.close()
        self.control.close()


class VerbsTransport(Transport):
    """Backend ``verbs``.

    device: RDMA device name (default: the first one); port: its port (1);
    gid_index: GID table index (RoCEv2 usually needs the index of a v2 GID);
    host: address of the UDP control socket (reachable by the peer).
    """

    name: ClassVar[str] = "verbs"

    def __init__(
        self, device: str | None = None, port: int = 1, gid_index: int = 0, host: str = "0.0.0.0"
    ) -> None:
        self.pv: Pyverbs = load_pyverbs()
        names = device_names(self.pv)
        name = device or names[0]
        if name not in names:
            raise ConfigError(f"no RDMA device named {name!r}; devices here: {', '.join(names)}")
        pv = self.pv
        self.port, self.gid_index, self.host = port, gid_index, host
        self.ctx = pv.device.Context(name=name)
        try:
            self.pd = pv.pd.PD(self.ctx)
            port_attr = self.ctx.query_port(port)
            self.lid = int(port_attr.lid)
            self.active_mtu = int(port_attr.active_mtu)
            self.gid = gid_text(str(self.ctx.query_gid(port, gid_index)))
            e = pv.enums
            self.scratch = pv.mr.MR(self.pd, 64, int(e.IBV_ACCESS_LOCAL_WRITE))
            self.scratch_addr = int(self.scratch.buf)
        except BaseException:
            self.ctx.close()
            raise
        self._mrs: dict[int, Any] = {}
        self._qps: list[VerbsQP] = []

    def now(self) -> float:
        return time.monotonic()

    def register(self, buffer: object) -> MemoryRegion:
        """Register for sending (lkey). Remote access is granted per receive, in ``bind``,
        so the only remotely writable keys are those of posted receives."""
        view = as_byte_view(buffer)
        access = int(self.pv.enums.IBV_ACCESS_LOCAL_WRITE)
        mr = self.pv.mr.MR(self.pd, max(1, len(view)), access, address=_address(view))
        self._mrs[mr.lkey] = mr
        return MemoryRegion(key=mr.lkey, view=view, owner=(buffer, mr))

    def lkey_of(self, region: MemoryRegion) -> tuple[int, int]:
        """(base address, lkey) of a region registered here."""
        if region.key not in self._mrs:
            raise ConfigError("send buffers must be registered with this verbs transport")
        return _address(region.view), region.key

    def create_qp(self, attr: QPAttr) -> VerbsQP:
        qp = VerbsQP(self, attr)
        self._qps.append(qp)
        return qp

    def wait(self, timeout: float) -> None:
        """Wait for a control message; completions are polled (no CQ events)."""
        fds = [qp.control.fileno() for qp in self._qps if not qp._closed]
        select.select(fds, [], [], min(timeout, 0.0002)) if fds else time.sleep(timeout)

    def close(self) -> None:
        for qp in self._qps:
            qp.close()
        self._qps.clear()
        for mr in self._mrs.values():
            mr.close()
        self._mrs.clear()
        self.scratch.close()
        self.pd.close()
        self.ctx.close()
