"""The emulated long-haul link as a context manager, its forwarder in its own process.

    with TunLink(LinkSpec(rate="1Gbit/s", rtt="25ms", loss=1e-3)) as link:   # root
        run something in link.ns_a talking to link.addr_b ...
    link.summary   # what the link did (drops by cause, forwarded, lateness)

    with RelayLink(spec, a_ports=[...], b_ports=[...]) as relay:             # no root
        A sends to relay.for_a(i), B to relay.for_b(i)

The forwarder runs in a forked child so it has a core to itself; the parent only sets up
and tears down (always: on exit, exception and Ctrl-C). ``forwarder=`` picks the native
loop or the Python reference (``"auto"``, ``"native"``, ``"python"``; None reads
``$SDR_FORWARDER``, default auto: native where built and able to carry the link; see
:func:`sdr.backends.wan.native_forwarder.choose_forwarder`). ``link.forwarder`` says
which one ran; ``link.summary["report"]`` is what it did. ``TunLink(offload=...)``:
TUN offloads for the native forwarder (``"auto"``, ``"on"``, ``"off"``; None reads
``$SDR_TUN_OFFLOAD``; see :func:`~sdr.backends.wan.native_forwarder.choose_offload`);
``link.offload`` is the TUN_F_* flags the kernel took (0: none);
``link.summary["cpu_s"]`` the forwarder's CPU time (user, system) while the link was up.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from typing import Any

import attrs

from sdr.backends.wan.forwarder import Forwarder, Port
from sdr.backends.wan.namespaces import NamespacePair
from sdr.backends.wan.native_forwarder import (
    OFFLOAD_ENV,
    NativeForwarder,
    choose_forwarder,
    choose_offload,
)
from sdr.backends.wan.udp_relay import Address, RelayEnd, relay_pairs
from sdr.errors import ConfigError, TransportError
from sdr.simulator.link_model import LinkSpec

__all__ = ["TunLink", "RelayLink", "reverse_of"]

log = logging.getLogger(__name__)
_STOP_TIMEOUT_S = 5.0


def reverse_of(spec: LinkSpec) -> LinkSpec:
    """The other direction: same link, independent random draws."""
    return attrs.evolve(spec, seed=spec.seed + 1)


def _serve(
    kind: str,
    pairs: list[tuple[Port, Port]],
    a_to_b: LinkSpec,
    b_to_a: LinkSpec,
    stop: Any,
    ready: Any,
    conn: Any,
    corrupt_skip: int,
    max_packet: int,
) -> None:
    forwarder: Forwarder | NativeForwarder
    if kind == "native":
        forwarder = NativeForwarder(
            pairs, a_to_b, b_to_a, corrupt_skip=corrupt_skip, max_packet=max_packet
        )
    else:
        forwarder = Forwarder(pairs, a_to_b, b_to_a, corrupt_skip=corrupt_skip)
    start = os.times()
    try:
        if isinstance(forwarder, NativeForwarder):
            forwarder.prepare()  # the first decisions, before the link says it is up
        start = os.times()
        ready.set()
        forwarder.run(stop.is_set)
    finally:
        end = os.times()
        summary = forwarder.summary()
        summary["forwarder"] = kind
        # the forwarder process's CPU while the link was up (user, system; seconds)
        summary["cpu_s"] = {"user": end.user - start.user, "system": end.system - start.system}
        summary["bad_icrc"] = sum(getattr(p, "bad_icrc", 0) for pair in pairs for p in pair)
        conn.send(summary)


class _ForwardingLink:
    def __init__(
        self,
        spec: LinkSpec,
        reverse: LinkSpec | None,
        corrupt_skip: int,
        forwarder: str | None = None,
        max_packet: int = 65535,
    ) -> None:
        self.spec = spec
        self.reverse = reverse or reverse_of(spec)
        self.corrupt_skip = corrupt_skip
        self.requested = forwarder
        self.forwarder = ""
        """Which forwarder runs the link ("native" or "python"), once started."""
        self.max_packet = max_packet
        self.summary: dict[str, Any] = {}
        self._proc: Any = None

    def _start(self, pairs: list[tuple[Port, Port]]) -> None:
        self.forwarder = choose_forwarder(self.requested, pairs, self.spec, self.reverse)
        ctx = mp.get_context("fork")
        self._stop = ctx.Event()
        ready = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_serve,
            daemon=True,
            name="sdr-wan-forwarder",
            args=(
                self.forwarder,
                pairs,
                self.spec,
                self.reverse,
                self._stop,
                ready,
                send,
                self.corrupt_skip,
                self.max_packet,
            ),
        )
        self._proc.start()
        if not ready.wait(_STOP_TIMEOUT_S):
            log.warning("the WAN emulator's forwarder took over %.0f s to start", _STOP_TIMEOUT_S)

    def _stop_forwarder(self) -> None:
        if self._proc is None:
            return
        self._stop.set()
        self._proc.join(_STOP_TIMEOUT_S)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(_STOP_TIMEOUT_S)
        if self._recv.poll(0.5):
            self.summary = self._recv.recv()
        self._proc = None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()


class TunLink(_ForwardingLink):
    """A link between two new network namespaces, carrying any IP traffic (root)."""

    def __init__(
        self,
        spec: LinkSpec,
        reverse: LinkSpec | None = None,
        mtu: int = 9000,
        forwarder: str | None = None,
        offload: str | None = None,
    ) -> None:
        # corrupt_skip keeps the IPv4 + UDP/ICMP headers intact
        super().__init__(spec, reverse, corrupt_skip=28, forwarder=forwarder, max_packet=mtu)
        self.offload_choice = offload
        self.offload = 0
        """TUN_F_* offload flags the kernel took (0: none; set on entry)."""
        self.pair = NamespacePair(mtu=mtu)
        self.ns_a, self.ns_b = self.pair.a, self.pair.b
        self.addr_a, self.addr_b = self.pair.addr_a, self.pair.addr_b

    def __enter__(self) -> TunLink:
        kind = choose_forwarder(self.requested, None, self.spec, self.reverse)
        self.pair.offload = choose_offload(self.offload_choice, kind)
        self.pair.__enter__()
        try:
            assert self.pair.tun_a is not None and self.pair.tun_b is not None
            self.offload = self.pair.tun_a.offload if self.pair.tun_b.offload else 0
            if self.pair.offload and not self.offload and self._offload_required():
                raise ConfigError("the kernel refused TUN offloads (TUNSETOFFLOAD)")
            self._start([(self.pair.tun_a, self.pair.tun_b)])
        except BaseException:
            self.pair.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop_forwarder()
            self.summary["tun_offload"] = self.offload
        finally:
            self.pair.close()

    def _offload_required(self) -> bool:
        return (self.offload_choice or os.environ.get(OFFLOAD_ENV)) == "on"


class RelayLink(_ForwardingLink):
    """A link through a UDP relay on loopback (no root). See sdr.backends.wan.udp_relay."""

    def __init__(
        self,
        spec: LinkSpec,
        a_ports: list[Address],
        b_ports: list[Address],
        reverse: LinkSpec | None = None,
        reseal: bool = True,
        forwarder: str | None = None,
    ) -> None:
        super().__init__(spec, reverse, corrupt_skip=0, forwarder=forwarder)
        self.pairs: list[tuple[RelayEnd, RelayEnd]] = relay_pairs(a_ports, b_ports, reseal=reseal)

    def for_a(self, index: int) -> Address:
        """Where A sends what it means for B's ``index``-th port."""
        return self.pairs[index][0].address

    def for_b(self, index: int) -> Address:
        """Where B sends what it means for A's ``index``-th port."""
        return self.pairs[index][1].address

    def __enter__(self) -> RelayLink:
        try:
            self._start(self.pairs)  # type: ignore[arg-type]
        except BaseException:
            self._close_sockets()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop_forwarder()
        finally:
            self._close_sockets()

    def _close_sockets(self) -> None:
        for pair in self.pairs:
            for end in pair:
                end.close()


def require_alive(link: _ForwardingLink) -> None:
    """Raise if the forwarder process died (a broken link must not look like loss)."""
    if not link.alive:
        raise TransportError("the WAN emulator's forwarder process is not running")
