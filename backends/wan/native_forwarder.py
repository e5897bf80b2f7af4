"""The emulator's forwarder in C (``sdr.backends.wan._forward``), driven by the link model.

:class:`NativeForwarder` has the constructor, ``run`` and ``summary``/``report`` of the
Python :class:`~sdr.backends.wan.forwarder.Forwarder` (the reference). The link stays
defined once: every random decision (loss and whether a burst model made it, reorder
hold, duplicate, corruption and its bit) comes from
:class:`~sdr.simulator.link_model.LinkDirection` fed with the offered packets in order,
precomputed here in chunks and handed to the C loop as arrays. The loop does what needs a
clock: batched reads, the drop-tail queue and serialization at the link rate (the model's
formula), blackouts, the delay line and the writes, with the GIL released.

Its decisions match the model's packet for packet, except where a packet the queue drops
would have been corrupted: the model then skips that packet's draw of where to flip, the
precomputation does not (the corruption *rate* is the same).

It takes TUN devices and UDP relay ends without ICRC resealing (which runs in Python), and
loss models that ignore the packet size (Bernoulli, Gilbert-Elliott, traces, schedules of
those). :func:`choose_forwarder` picks it where it can (``auto``) and says why not.

TUN offloads (:func:`choose_offload`, ``$SDR_TUN_OFFLOAD``): a TUN device opened with
offloads hands the loop GSO packets of up to 64 KiB, which the loop cuts into the wire
packets the kernel would have sent before any of them meets the link (so every decision
is still per wire packet, from the same columns), and it merges runs of due packets of
one flow back into one GSO write. Only this forwarder reads such devices.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from sdr.backends.wan.forwarder import LATE_AFTER_S, Port, direction_report
from sdr.backends.wan.tun import TunDevice
from sdr.backends.wan.udp_relay import RelayEnd
from sdr.errors import ConfigError
from sdr.native import load_extension
from sdr.simulator.link_model import LOSS, LinkDirection, LinkSpec
from sdr.simulator.loss import Bernoulli, GilbertElliott, LossModel, Schedule, TraceReplay

# not built (no compiler at install time): None, and why; SDR_FORWARD_NATIVE names another
# build to load (the sanitizer build of `make asan`)
_forward, _why = load_extension("sdr.backends.wan._forward", "SDR_FORWARD_NATIVE")
NATIVE_ERROR: str | None = _why or None

__all__ = [
    "FORWARDER_ENV",
    "FORWARDERS",
    "OFFLOADS",
    "OFFLOAD_ENV",
    "NATIVE_ERROR",
    "NativeForwarder",
    "choose_forwarder",
    "choose_offload",
    "native_unsupported",
]

log = logging.getLogger(__name__)

FORWARDER_ENV = "SDR_FORWARDER"
"""Environment variable: ``auto`` (default), ``native`` or ``python``."""
FORWARDERS = ("auto", "native", "python")
OFFLOAD_ENV = "SDR_TUN_OFFLOAD"
"""Environment variable: ``auto`` (default: TUN offloads for the native forwarder where the
kernel takes them), ``on`` (an error where it cannot) or ``off``."""
OFFLOADS = ("auto", "on", "off")

_CHUNK = 16384  # most decisions precomputed per call of the link model ...
_CHUNK_S = 2e-3  # ... and about how long one call may take (the loop waits meanwhile)
_MIN_CHUNK = 1024
_SLICE_S = 0.05  # the C loop returns at least this often (stop checks, refills)
_SHADOW_RATE = 1e15  # the decision model's rate and spacing: its queue never fills
_SHADOW_SPACING_S = 1e-3
_MAX_BLACKOUTS = 64
_KIND_TUN, _KIND_UDP, _KIND_TUN_VNET = 0, 1, 2


def _size_blind(model: LossModel | None) -> bool:
    if model is None or isinstance(model, Bernoulli | GilbertElliott | TraceReplay):
        return True
    if isinstance(model, Schedule):
        return all(_size_blind(m) for _, m in model.phases)
    return False


def _port_tuple(port: Port) -> tuple[int, int, int, int] | str:
    """(fd, kind, IPv4 host, UDP port) for the C loop, or why the port cannot go there."""
    if isinstance(port, TunDevice):
        return (port.fileno(), _KIND_TUN_VNET if port.offload else _KIND_TUN, 0, 0)
    if isinstance(port, RelayEnd):
        if port.reseal:
            return "the relay reseals RoCE ICRCs in Python (reseal=False runs natively)"
        host, udp_port = port.target[0], port.target[1]
        try:
            addr = ipaddress.IPv4Address(host)
        except ValueError:
            return f"relay target {host!r} is not an IPv4 address"
        return (port.fileno(), _KIND_UDP, int(addr), int(udp_port))
    return f"port {type(port).__name__} is neither a TUN device nor a UDP relay end"


def native_unsupported(
    pairs: Sequence[tuple[Port, Port]] | None, a_to_b: LinkSpec, b_to_a: LinkSpec
) -> str | None:
    """Why the native forwarder cannot carry this link (None: it can). ``pairs`` None: one
    pair of TUN devices, not made yet."""
    if _forward is None:
        return f"sdr.backends.wan._forward is not built ({NATIVE_ERROR})"
    for spec in (a_to_b, b_to_a):
        if not _size_blind(spec.loss):
            return (
                f"loss model {type(spec.loss).__name__} depends on the packet size "
                "(decisions are precomputed before the packets are read)"
            )
        if len(spec.blackouts) > _MAX_BLACKOUTS:
            return f"{len(spec.blackouts)} blackouts (at most {_MAX_BLACKOUTS})"
    if pairs is None:
        return None
    if not 1 <= len(pairs) <= 32:
        return f"{len(pairs)} port pairs (1..32 natively)"
    for pair in pairs:
        for port in pair:
            why = _port_tuple(port)
            if isinstance(why, str):
                return why
    return None


def choose_forwarder(
    choice: str | None,
    pairs: Sequence[tuple[Port, Port]] | None,
    a_to_b: LinkSpec,
    b_to_a: LinkSpec,
) -> str:
    """``"native"`` or ``"python"`` for ``choice`` (None: ``$SDR_FORWARDER``, else
    ``auto``). ``auto`` takes native where it is built and can carry the link; asking for
    ``native`` where it cannot is a ConfigError naming the reason."""
    choice = choice or os.environ.get(FORWARDER_ENV) or "auto"
    if choice not in FORWARDERS:
        raise ConfigError(f"forwarder must be one of {', '.join(FORWARDERS)}, got {choice!r}")
    if choice == "python":
        return "python"
    reason = native_unsupported(pairs, a_to_b, b_to_a)
    if reason is None:
        return "native"
    if choice == "native":
        raise ConfigError(f"forwarder 'native' cannot carry this link: {reason}")
    log.info("WAN emulator runs the Python forwarder: %s", reason)
    return "python"


def choose_offload(choice: str | None, forwarder: str) -> bool:
    """Whether to ask for TUN offloads for ``choice`` (None: ``$SDR_TUN_OFFLOAD``, else
    ``auto``) with ``forwarder`` running the link: ``auto`` and ``on`` ask where it is the
    native one (``on`` with the Python one is a ConfigError); the kernel may still refuse
    (then ``auto`` runs without, ``on`` is an error: see TunLink)."""
    choice = choice or os.environ.get(OFFLOAD_ENV) or "auto"
    if choice not in OFFLOADS:
        raise ConfigError(f"TUN offload must be one of {', '.join(OFFLOADS)}, got {choice!r}")
    if choice == "on" and forwarder != "native":
        raise ConfigError("TUN offloads need the native forwarder (the Python one runs)")
    return choice != "off" and forwarder == "native"


class _Decider:
    """The link model's random decisions for the next offered packets of one direction.

    A shadow of the direction (same spec and seed, so the same random streams) whose
    queue never fills and whose delay is zero: what it decides besides the queue is what
    the direction decides; its arrival times past the (tiny) serialization are the
    reorder holds."""

    def __init__(self, spec: LinkSpec) -> None:
        shadow = attrs.evolve(spec, rate=_SHADOW_RATE, rtt=0.0, queue=_SHADOW_RATE, blackouts=())
        self.model = LinkDirection(shadow)
        self.loss_code = 2 if isinstance(spec.loss, GilbertElliott) else 1
        self.chunk = _MIN_CHUNK
        """Decisions per call, set by :meth:`measure` so that a call takes ~2 ms."""

    def measure(self) -> tuple[np.ndarray, ...]:
        """The first decisions; sizes :attr:`chunk` from how long they took."""
        t = time.perf_counter()
        first = self.next(_MIN_CHUNK)
        per = (time.perf_counter() - t) / _MIN_CHUNK
        self.chunk = int(min(_CHUNK, max(_MIN_CHUNK, _CHUNK_S / max(per, 1e-9))))
        return first

    def next(self, n: int) -> tuple[np.ndarray, ...]:
        """(loss, extra, dup, corrupt, where, bit) columns for ``n`` packets."""
        self.model.last_finish = 0.0  # every chunk starts on an idle wire at t = 0
        starts = np.arange(n, dtype=np.float64) * _SHADOW_SPACING_S
        d = self.model.offer(starts, np.ones(n))
        loss = np.where(d.cause == LOSS, self.loss_code, 0).astype(np.uint8)
        ok = d.cause == 0
        extra = np.zeros(n)
        extra[ok] = d.arrive[ok] - starts[ok] - 8.0 / _SHADOW_RATE
        extra[extra < 1e-12] = 0.0  # float rounding of the shadow's clock, not a hold
        zeros = np.zeros(n, np.uint8)
        dup = zeros if d.duplicate_at is None else (d.duplicate_at == d.duplicate_at)
        bad = zeros if d.corrupt is None else d.corrupt
        where = np.zeros(n) if d.where is None else np.clip(d.where, 0.0, np.nextafter(1.0, 0))
        bit = zeros if d.bit is None else d.bit
        return (
            loss,
            extra,
            np.ascontiguousarray(dup, np.uint8),
            np.ascontiguousarray(bad, np.uint8),
            np.ascontiguousarray(where, np.float64),
            np.ascontiguousarray(bit, np.uint8),
        )


def _slots(specs: Sequence[LinkSpec], max_packet: int) -> int:
    """Packet slots for what can be in flight: queue + delay line of both directions."""
    held = 0.0
    for spec in specs:
        hold = spec.one_way_delay + float(spec.reorder_delay) + float(spec.reorder_jitter)
        held += float(spec.queue) + float(spec.rate) * hold / 8
    return int(min(max(2 * held / min(max_packet, 9000) + 8192, 16), 1 << 22))


class NativeForwarder:
    """The native loop behind the Python :class:`Forwarder`'s interface.

    ``max_packet``: the largest packet a port may carry (a TUN device's MTU; 65535 for UDP);
    a larger one is dropped and counted (``oversize``). ``coalesce``: merge runs of due
    packets of one flow into one GSO write on TUN ports with offloads. ``clock`` must be
    :func:`time.monotonic` (the loop reads CLOCK_MONOTONIC itself).
    """

    def __init__(
        self,
        pairs: list[tuple[Port, Port]],
        a_to_b: LinkSpec,
        b_to_a: LinkSpec,
        corrupt_skip: int = 28,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_packet: int = 65535,
        late_after: float = LATE_AFTER_S,
        coalesce: bool = True,
    ) -> None:
        if reason := native_unsupported(pairs, a_to_b, b_to_a):
            raise ConfigError(f"the native forwarder cannot carry this link: {reason}")
        if clock is not time.monotonic:
            raise ConfigError("the native forwarder runs on CLOCK_MONOTONIC (time.monotonic)")
        self.ports = [port for pair in pairs for port in pair]
        self.specs = (a_to_b, b_to_a)
        self._deciders = (_Decider(a_to_b), _Decider(b_to_a))
        self._loop: Any = _forward.Loop(  # type: ignore[union-attr]
            [_port_tuple(p) for p in self.ports],
            (float(a_to_b.rate), float(b_to_a.rate)),
            (a_to_b.one_way_delay, b_to_a.one_way_delay),
            (float(a_to_b.queue), float(b_to_a.queue)),
            [list(a_to_b.blackouts), list(b_to_a.blackouts)],
            corrupt_skip,
            max_packet,
            _slots(self.specs, max_packet),
            late_after,
            coalesce,
        )

        self._prepared = False

    def prepare(self) -> None:
        """Precompute the first decisions (a few chunks per direction) before packets flow."""
        if self._prepared:
            return
        loop = self._loop
        for k, decider in enumerate(self._deciders):
            loop.feed(k, *decider.measure())
            while loop.pending(k) < 4 * decider.chunk and loop.room(k) >= decider.chunk:
                loop.feed(k, *decider.next(decider.chunk))
        self._prepared = True

    def run(self, should_stop: Callable[[], bool], until: float | None = None) -> None:
        """Forward until ``should_stop()`` is true (checked at least every 50 ms).

        Between slices of the C loop, one chunk of decisions per direction is added while
        the ring has room; the loop comes back early when a direction is down to half of
        what it had (or one chunk), so a slow loss model slows the link, never stalls it."""
        self.prepare()
        loop, deciders = self._loop, self._deciders
        while not should_stop():
            now = time.monotonic()
            if until is not None and now >= until:
                return
            low = []
            for k, decider in enumerate(deciders):
                if loop.room(k) >= decider.chunk and loop.pending(k) < _forward.RING // 2:  # type: ignore[union-attr]
                    loop.feed(k, *decider.next(decider.chunk))
                low.append(min(decider.chunk, loop.pending(k) // 2))
            loop.run(_SLICE_S if until is None else max(0.0, min(_SLICE_S, until - now)), *low)

    def native_stats(self) -> dict[str, dict[str, int | float]]:
        """The C loop's own counters per direction (``write_errors``: writes the port
        refused; ``pool_drops``: packets with no free slot; ``oversize``; ``in_flight``)."""
        return {name: self._loop.stats(k) for k, name in enumerate(("a_to_b", "b_to_a"))}

    def _link_stats(self, c: dict[str, int | float]) -> dict[str, int | float]:
        """The C counters under :class:`~sdr.simulator.link_model.LinkStats` names."""
        return {
            "packets": c["packets"],
            "bytes": c["bytes"],
            "delivered": c["delivered"],
            "queue_drops": c["queue_drops"],
            "loss_drops": c["loss_random"] + c["loss_burst"],
            "blackout_drops": c["blackout_drops"],
            "duplicated": c["duplicated"],
            "reordered": c["reordered"],
            "corrupted": c["corrupted"],
            "control_packets": 0,
            "control_lost": 0,
            "max_backlog_bytes": c["max_backlog_bytes"],
        }

    def report(self) -> dict[str, dict[str, int | float]]:
        """What the emulator did, per direction, in the Python forwarder's keys."""
        out = {}
        for k, (name, c) in enumerate(self.native_stats().items()):
            spec = self.specs[k]
            out[name] = direction_report(
                spec, self._link_stats(c), spec.loss, int(c["late"]), float(c["max_lateness_s"])
            )
        return out

    def summary(self) -> dict[str, object]:
        """Counters of both directions and of the loop (as the Python forwarder's), plus
        :meth:`report` and the native loop's own counters."""
        native = self.native_stats()
        return {
            "a_to_b": self._link_stats(native["a_to_b"]),
            "b_to_a": self._link_stats(native["b_to_a"]),
            "forwarded": sum(int(c["forwarded"]) for c in native.values()),
            "max_lateness_s": max(float(c["max_lateness_s"]) for c in native.values()),
            "report": self.report(),
            "native": native,
        }
