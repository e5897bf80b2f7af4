"""Backend ``udp``: SDR packets as RoCEv2 UC writes-with-immediate over UDP sockets.

One UdpTransport is one software "NIC port": a data socket on (host, port) (4791, the
RoCEv2 port, by default) shared by all its QPs and demultiplexed by destination QPN,
like a real RoCE NIC, and a separate control socket for small messages (CTS, ACK, NACK).

Datapath: batches of datagrams move with one sendmmsg/recvmmsg call (sdr.backends.udp.mmsg);
the send side points iovecs straight into registered memory, the receive side validates
in a pre-faulted staging ring and copies once into the registered region
(sdr.backends.udp.receive). All work happens inside the caller's progress calls: no threads.
"""

from __future__ import annotations

import itertools
import logging
import select
import socket
import struct
import time
from typing import Any, ClassVar

import numpy as np

from sdr.backends.udp import native
from sdr.backends.udp.contracts import CONTROL_HEADER, QPN_MAX, QPN_MIN
from sdr.backends.udp.qp import UdpQP
from sdr.backends.udp.receive import Receiver
from sdr.backends.udp.roce import ROCE_PORT, crc32
from sdr.backends.udp.sockets import (
    DEFAULT_SOCKET_BUFFER,
    open_udp_socket,
    prefault,
    socket_drops,
)
from sdr.config import QPAttr
from sdr.errors import ConfigError, ResourceBusy, TransportError
from sdr.queue_pair import MAX_QUEUED_CONTROL
from sdr.transport import MAX_CONTROL_SIZE, MemoryRegion, Transport, as_byte_view

__all__ = ["CONTROL_READS_PER_PUMP", "EndpointTable", "UdpTransport"]

log = logging.getLogger(__name__)

_CRC = struct.Struct("!I")
"""Control datagrams end with a CRC-32 of what precedes it (the data path has its ICRC):
with UDP checksums off, a damaged CTS would otherwise misdirect a whole message."""
_OVERHEAD = CONTROL_HEADER.size + _CRC.size
MAX_PATHS = 64
"""Data ports a transport may receive on (``paths``)."""
_RANDOM_TRIES = 64  # random draws for a free QPN or control id before a scan
CONTROL_READS_PER_PUMP = MAX_QUEUED_CONTROL
"""Most control datagrams one :meth:`UdpTransport.pump_control` reads: a flood faster than
they are processed cannot keep one progress call reading forever (the rest wait in the
kernel's bounded socket buffer)."""
CONTROL_ID_MIN, CONTROL_ID_MAX = 1, (1 << 32) - 1


class EndpointTable(dict[int, tuple[UdpQP, int, int]]):
    """QPN -> (QP, generation, channel), with the QPNs added, removed or whose QP changed
    since the receive path last looked (``touched``), so it updates its tables instead of
    rebuilding them: creating a QP costs the same however many exist."""

    def __init__(self) -> None:
        super().__init__()
        self.touched: list[int] = []


def _free_id(taken: dict[int, Any], low: int, high: int, rng: np.random.Generator) -> int | None:
    """A random integer in [low, high] not in ``taken`` (None when all are taken)."""
    if len(taken) >= high - low + 1:
        return None
    for _ in range(_RANDOM_TRIES):
        value = int(rng.integers(low, high + 1))
        if value not in taken:
            return value
    start = int(rng.integers(low, high + 1))  # nearly full: scan on from a random point
    scan = itertools.chain(range(start, high + 1), range(low, start))
    return next((v for v in scan if v not in taken), None)


class UdpTransport(Transport):
    """Backend ``udp``: software RoCEv2 (UC) over UDP.

    host: IPv4 address to bind and to advertise to peers (not 0.0.0.0: the ICRC covers it).
    port: UDP port of the data socket (4791 is the RoCEv2 port; 0 picks a free one).
    control_port: UDP port of the control socket (0 picks a free one).
    socket_buffer: SO_RCVBUF/SO_SNDBUF in bytes (raised with privilege when possible).
    prefault: touch registered buffers once so first writes do not page-fault.
    seed: seeds QPN and rkey choice (None: unpredictable, the default).
    verify_icrc: check every received packet's ICRC (default). Turning it off saves one
        pass over the payload; the UDP checksum still guards real links (not loopback),
        and packets are still checked for QPN, rkey, length and key-table placement.
    gso: send equal-sized packets several per system call with UDP_SEGMENT, where the
        kernel has it (default; native datapath only). The wire carries the same datagrams.
        A socket with UDP checksums turned off (SO_NO_CHECK) sends without GSO: the kernel
        refuses GSO there.
    gro: ask the kernel to hand received datagrams over several per read (UDP_GRO;
        default; native datapath only).
    paths: data ports to receive on (default 1). With more, a QP's channel c is sent to
        the peer's port ``c % paths``, so the channels differ in the 5-tuple an ECMP
        switch hashes and may take distinct routes (multipath). The ports are ``port``,
        ``port + 1`` ... ``port + paths - 1`` (a range a firewall or a policy route can
        name), or all picked free with ``port=0``. Each port has its own receive pass.
    """

    name: ClassVar[str] = "udp"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = ROCE_PORT,
        control_port: int = 0,
        socket_buffer: int = DEFAULT_SOCKET_BUFFER,
        prefault: bool = True,
        seed: int | None = None,
        verify_icrc: bool = True,
        gso: bool = True,
        gro: bool = True,
        paths: int = 1,
    ) -> None:
        if isinstance(paths, bool) or not isinstance(paths, int) or not 1 <= paths <= MAX_PATHS:
            raise ConfigError(f"paths must be an integer in [1, {MAX_PATHS}], got {paths!r}")
        if port and int(port) + paths - 1 > 65535:
            raise ConfigError(f"ports {port}..{int(port) + paths - 1} go past 65535")
        self.rng = np.random.default_rng(seed)
        self.data_socket = open_udp_socket(host, int(port), int(socket_buffer))
        self.data_sockets = [self.data_socket]
        """One per path: the first sends every datagram and receives path 0's."""
        try:
            for i in range(1, paths):  # port P: P+1, P+2 ... (a firewall's range); 0: free
                extra = int(port) + i if port else 0
                self.data_sockets.append(open_udp_socket(host, extra, int(socket_buffer)))
            self.control_socket = open_udp_socket(host, int(control_port), 1 << 20)
        except TransportError:
            for sock in self.data_sockets:
                sock.close()
            raise
        self.host, self.port = self.data_socket.getsockname()  # canonical: "127.1" -> "127.0.0.1"
        self.ports = [sock.getsockname()[1] for sock in self.data_sockets]
        """The data ports, path by path (``ports[0] == port``)."""
        self.control_port = self.control_socket.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        """:meth:`interrupt`'s self-pipe: its read end is in every :meth:`wait`."""
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)
        self.prefault = prefault
        self._endpoints = EndpointTable()
        self._controls: dict[int, UdpQP] = {}
        self._qps: dict[UdpQP, None] = {}  # insertion-ordered set: O(1) removal
        self.pump_round = 0
        """Counts data-socket pumps: a QP that sees a pump since its last look skips its own."""
        self.drained = False  # the last pump emptied the data socket
        self.control_round = 0
        self.control_drained = False
        self.stats = {
            "unknown_qpn": 0,
            "bad_opcode": 0,
            "runt": 0,
            "control_unknown": 0,
            "control_bad_source": 0,
            "control_bad_crc": 0,
        }
        self.local_ip = int.from_bytes(socket.inet_aton(self.host), "big")
        self.gso = bool(gso) and native.supports_gso(self.data_socket)
        self._receivers = [
            Receiver((self.host, p), self.stats, verify_icrc, bool(gro)) for p in self.ports
        ]
        self._receiver = self._receivers[0]
        self.port_datagrams = [0] * len(self.ports)
        """Datagrams read on each data port (path), for tools and tests."""

    # --- Transport interface ----------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic()

    def register(self, buffer: object) -> MemoryRegion:
        view = as_byte_view(buffer)
        if self.prefault:
            prefault(view)
        return MemoryRegion(key=int(self.rng.integers(1, 1 << 32)), view=view, owner=buffer)

    def create_qp(self, attr: QPAttr) -> UdpQP:
        qp = UdpQP(self, attr)
        self._qps[qp] = None
        self.endpoints_changed()
        return qp

    def wait(self, timeout: float) -> None:
        """Block until a socket is readable, a paced QP may send again, another thread
        calls :meth:`interrupt`, or ``timeout``."""
        left = self._until_a_batch(timeout)
        if left > 0:
            ready, _, _ = select.select(
                [*self.data_sockets, self.control_socket, self._wake_r], [], [], left
            )
            if self._wake_r in ready:
                self._drain_wakes()

    can_interrupt: ClassVar[bool] = True

    def interrupt(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (a wake-up is pending already) or closed
            pass

    def _drain_wakes(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:  # empty (BlockingIOError) or closed
            pass

    can_hold: ClassVar[bool] = True

    def hold(self, seconds: float) -> None:
        """Sleep ``seconds``: datagrams wait in the socket buffers (sized for that,
        ``sockets.py``); a paced QP's next batch still bounds it (as :meth:`wait`)."""
        left = self._until_a_batch(seconds)
        if left > 0:
            time.sleep(left)

    def _until_a_batch(self, seconds: float) -> float:
        """``seconds``, or less when a paced QP may send its next batch sooner."""
        now = self.now()
        wake = now + seconds
        for qp in self._qps:
            when = qp.next_send_time(now)
            if now < when < wake:
                wake = when
        return wake - now

    def socket_drops(self) -> int | None:
        """Datagrams the kernel dropped at the data sockets because this process did not
        read them in time (a full receive buffer): loss the link did not cause. None where
        the kernel does not say (not Linux)."""
        return socket_drops(self.data_sockets)

    def maybe_readable(self) -> bool:
        readable, _, _ = select.select([*self.data_sockets, self.control_socket], [], [], 0)
        return bool(readable)

    def close(self) -> None:
        for qp in list(self._qps):
            self.forget(qp)
        for sock in (*self.data_sockets, self.control_socket, self._wake_r, self._wake_w):
            sock.close()

    # --- QP bookkeeping ---------------------------------------------------------------------
    def new_qpn(self, qp: UdpQP, generation: int, channel: int) -> int:
        """A fresh random 24-bit QPN (0 and 1 are reserved in InfiniBand) for one endpoint.

        Raises ResourceBusy when every QPN of the transport is in use.
        """
        qpn = _free_id(self._endpoints, QPN_MIN, QPN_MAX, self.rng)
        if qpn is None:
            raise ResourceBusy(
                f"no free QPN: all {QPN_MAX - QPN_MIN + 1} QPNs ({QPN_MIN}..{QPN_MAX}) of this "
                f"UDP transport are in use by {len(self._qps)} QPs; close QPs to free theirs"
            )
        self._endpoints[qpn] = (qp, generation, channel)
        self._endpoints.touched.append(qpn)
        return qpn

    def endpoints_changed(self, qp: UdpQP | None = None) -> None:
        """Tell the receive path that QPNs or rkeys were added or removed, or (``qp``) that
        this QP's peer changed."""
        table = self._endpoints
        if qp is not None:
            table.touched.extend(q for row in qp.qpns for q in row)
        touched = list(table.touched)
        for receiver in self._receivers:  # each port's pass takes the same changes
            table.touched[:] = touched
            receiver.set_endpoints(table)

    def new_control_id(self, qp: UdpQP) -> int:
        """A fresh random 32-bit id addressing ``qp`` on the control socket."""
        cid = _free_id(self._controls, CONTROL_ID_MIN, CONTROL_ID_MAX, self.rng)
        if cid is None:
            raise ResourceBusy(f"no free control id: {len(self._controls)} QPs hold them all")
        self._controls[cid] = qp
        return cid

    def forget(self, qp: UdpQP) -> None:
        """Release a QP's QPNs and control id: its later packets count as unknown."""
        for qpns in qp.qpns:
            for qpn in qpns:
                if self._endpoints.pop(qpn, None) is not None:
                    self._endpoints.touched.append(qpn)
        if self._controls.get(qp.control_id) is qp:
            del self._controls[qp.control_id]
        self.endpoints_changed()
        self._qps.pop(qp, None)

    def transport_counters(self) -> dict[str, int]:
        """Discards that belong to no QP (unknown QPN, wrong opcode, runt datagrams)."""
        return dict(self.stats)

    # --- receive datapath -------------------------------------------------------------------
    def pump(self, max_packets: int) -> int:
        """Receive up to ``max_packets`` datagrams, validate and place them; returns the count."""
        got, drained = 0, True
        for path, (receiver, sock) in enumerate(
            zip(self._receivers, self.data_sockets, strict=True)
        ):
            left = max_packets - got
            if left <= 0:
                drained = False
                break
            n = receiver.pump(sock, left)
            self.port_datagrams[path] += n
            got += n
            drained &= n < left  # fewer than asked: this port is empty
        self.pump_round += 1
        self.drained = drained
        return got

    # --- control path -----------------------------------------------------------------------
    def send_control(self, address: tuple[str, int], control_id: int, data: bytes) -> None:
        """Send one control message to the QP ``control_id`` at ``address``."""
        try:
            datagram = CONTROL_HEADER.pack(control_id) + data
            self.control_socket.sendto(datagram + _CRC.pack(crc32(datagram)), address)
        except BlockingIOError:
            log.debug("control message dropped: send queue full")  # unreliable, like UC
        except OSError as exc:
            raise TransportError(f"sending a control message to {address}: {exc}") from exc

    def pump_control(self) -> int:
        """Read pending control datagrams (at most CONTROL_READS_PER_PUMP) and queue each on
        the QP it names, if it comes from that QP's peer (others count as
        ``control_bad_source``); returns how many were read."""
        recv = self.control_socket.recvfrom
        self.control_round += 1
        self.control_drained = False
        for count in range(CONTROL_READS_PER_PUMP):
            try:
                data, source = recv(MAX_CONTROL_SIZE + _OVERHEAD)
            except BlockingIOError:
                self.control_drained = True
                return count
            except OSError as exc:
                log.debug("control receive error ignored: %s", exc)
                continue
            qp = None
            if len(data) >= _OVERHEAD:
                qp = self._controls.get(CONTROL_HEADER.unpack_from(data)[0])
            if qp is None:
                self.stats["control_unknown"] += 1
                continue
            if source != qp.peer_control:
                self.stats["control_bad_source"] += 1
                continue
            if crc32(data[: -_CRC.size]) != _CRC.unpack_from(data, len(data) - _CRC.size)[0]:
                self.stats["control_bad_crc"] += 1  # damaged: dropped, like a lost message
                continue
            qp.queue_control(data[CONTROL_HEADER.size : -_CRC.size])
        return CONTROL_READS_PER_PUMP

    def info(self) -> dict[str, Any]:
        """Where this transport listens (for logs and tools)."""
        info = {"host": self.host, "port": self.port, "control_port": self.control_port}
        return info | ({"ports": list(self.ports)} if len(self.ports) > 1 else {})


def loopback_pair(**kwargs: Any) -> tuple[UdpTransport, UdpTransport]:
    """Two transports on 127.0.0.1 with free ports (tests, demos)."""
    kwargs.setdefault("port", 0)
    return UdpTransport(**kwargs), UdpTransport(**kwargs)
