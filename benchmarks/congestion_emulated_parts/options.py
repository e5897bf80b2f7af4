"""The command line of ``benchmarks.congestion_emulated``: its flags, their checks (a bad
value is one :class:`UsageError` line) and the validated :class:`Options`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdr.backends.wan.native_forwarder import FORWARDERS
from sdr.errors import ConfigError
from sdr.units import parse_rate, parse_size, parse_time

TITLE = "SDR and kernel TCP at the same time through one emulated bottleneck (issue 21)."
"""The first line of the benchmark's docstring: ``--help``'s description."""


SCENARIOS = ("compete", "loss", "pair")
TCP_KINDS = ("cubic", "bbr", "reno")
SDR_SCHEMES = ("sr-nack", "sr-rto", "ec-mds", "ec-xor")


class UsageError(ValueError):
    """A bad command-line value; the message is one line."""


@dataclass(frozen=True)
class ControllerSpec:
    """One SDR congestion setting: ``name`` plus ``congestion_params`` (``label`` as given)."""

    label: str
    name: str
    params: dict[str, float] = field(default_factory=dict)

    def toml(self, global_timeout: float | None = None) -> str:
        """The ``--config`` file for ``sdr send`` (empty when it would set nothing):
        the params, and the messages' ``global_timeout`` (s) when given."""
        text = f"[reliability]\nglobal_timeout = {global_timeout!r}\n" if global_timeout else ""
        if self.params:
            lines = [f"{key} = {value!r}" for key, value in self.params.items()]
            text += "[reliability.congestion_params]\n" + "\n".join(lines) + "\n"
        return text


def _param_value(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    parse = parse_rate if key.endswith("rate") else parse_time
    try:
        return float(parse(text, field=key))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def parse_controller(text: str, rate: float) -> ControllerSpec:
    """``name[:key=value+key=value]`` as a :class:`ControllerSpec`, checked by building
    the controller once (an unknown name or parameter is a one-line UsageError)."""
    from sdr.congestion import controller_for

    name, _, rest = text.strip().partition(":")
    params: dict[str, float] = {}
    for item in filter(None, rest.split("+")):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise UsageError(f"controller parameter {item!r} in {text!r} must be key=value")
        params[key.strip()] = _param_value(key.strip(), value.strip())
    if name.lower() == "fixed" and params:
        raise UsageError(f"controller {text!r}: fixed takes no parameters")
    try:
        controller_for(name, rate, **params)
    except ConfigError as exc:
        raise UsageError(f"controller {text!r}: {exc}") from None
    return ControllerSpec(text.strip(), name.lower(), params)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _choices(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    values = _split(text)
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise UsageError(f"{flag} takes a comma-separated list of {list(allowed)}, got {text!r}")
    return values


def _floats(flag: str, text: str, low: float, high: float) -> list[float]:
    try:
        values = [float(v) for v in _split(text)]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated numbers, got {text!r}") from None
    if not values or any(not low <= v <= high for v in values):
        raise UsageError(f"{flag} values must be in [{low:g}, {high:g}], got {text!r}")
    return values


def _unit(flag: str, text: str, parse: Callable[..., Any]) -> Any:
    try:
        return parse(text, field=flag)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=TITLE, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="compete, loss, pair")
    p.add_argument("--rate", default="1Gbit/s", help="link rate (and SDR's --rate)")
    p.add_argument("--rtt", default="25ms", help="link round-trip time")
    p.add_argument("--buffers", default="1", help="link buffers in BDPs, comma-separated")
    p.add_argument("--tcp", default="cubic,bbr", help="kernel TCP flows for compete")
    p.add_argument("--controllers", default="delay,fixed,bbr", help="SDR controllers (compete)")
    p.add_argument("--loss-controllers", default="fixed,delay", help="SDR controllers (loss)")
    p.add_argument("--pair-controllers", default="delay,fixed", help="SDR controllers (pair)")
    p.add_argument("--losses", default="1e-3,1e-2", help="random loss rates (loss)")
    p.add_argument("--scheme", default="sr-nack", help="SDR reliability scheme")
    p.add_argument("--size", default="512MiB", help="SDR transfer (compete, pair)")
    p.add_argument("--loss-size", default="256MiB", help="SDR transfer (loss)")
    p.add_argument("--repeats", type=int, default=3, help="runs per controller (loss)")
    p.add_argument("--lead", type=float, default=3.0, help="s the first flow runs alone")
    p.add_argument(
        "--pair-lead", type=float, default=0.0, help="s between the pair's starts (+ start-up)"
    )
    p.add_argument("--settle", type=float, default=1.0, help="s after joining not counted")
    p.add_argument("--tail", type=float, default=1.0, help="s TCP runs after SDR is done")
    p.add_argument("--tcp-seconds", type=float, default=10.0, help="TCP alone (loss), s")
    p.add_argument("--tcp-buffer", default="64MiB", help="TCP socket buffer ceiling (sysctl)")
    p.add_argument("--message-size", default="4MiB", help="SDR message (progress step)")
    p.add_argument("--mtu", type=int, default=8192, help="SDR payload bytes per packet")
    p.add_argument("--chunk", default="64KiB", help="SDR chunk size")
    p.add_argument("--tun-mtu", type=int, default=9000, help="MTU of the emulated link")
    p.add_argument("--sdr-timeout", type=float, default=60.0, help="s before SDR gives up")
    p.add_argument(
        "--global-timeout", type=float, help="s an SDR message may take [default: the SDK's]"
    )
    p.add_argument("--forwarder", default="auto", help="auto, native or python")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="one small compete run (< 60 s)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="draw the figure here (PNG)")
    return p


@dataclass
class Options:
    """The validated command line (rates bits/s, times s, sizes bytes)."""

    scenarios: list[str]
    rate: float
    rtt: float
    buffers: list[float]
    tcp: list[str]
    controllers: list[ControllerSpec]
    loss_controllers: list[ControllerSpec]
    pair_controllers: list[ControllerSpec]
    losses: list[float]
    scheme: str
    size: int
    loss_size: int
    repeats: int
    lead: float
    pair_lead: float
    settle: float
    tail: float
    tcp_seconds: float
    tcp_buffer: int
    message_size: int
    mtu: int
    chunk: int
    tun_mtu: int
    sdr_timeout: float
    global_timeout: float | None
    forwarder: str
    seed: int
    quick: bool
    json: str | None
    plot: str | None
    argv: list[str] = field(default_factory=list)

    @property
    def bdp(self) -> float:
        """Bytes in flight at the link rate over one RTT."""
        return self.rate * self.rtt / 8


QUICK = {
    "scenarios": "compete",
    "tcp": "cubic",
    "controllers": "delay",
    "buffers": "1",
    "size": "64MiB",
    "lead": 2.0,
    "tail": 0.5,
    "settle": 0.5,
    "sdr_timeout": 30.0,
}
"""What ``--quick`` changes, where the command line left the default."""


def _apply_quick(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    for key, value in QUICK.items():
        if getattr(ns, key) == parser.get_default(key):
            setattr(ns, key, value)


def _check_numbers(ns: argparse.Namespace) -> None:
    for flag, value, low in (
        ("--lead", ns.lead, 0.5),
        ("--settle", ns.settle, 0.0),
        ("--pair-lead", ns.pair_lead, 0.0),
        ("--tail", ns.tail, 0.0),
        ("--tcp-seconds", ns.tcp_seconds, 1.0),
        ("--sdr-timeout", ns.sdr_timeout, 5.0),
        ("--global-timeout", ns.global_timeout or 1.0, 1.0),
    ):
        if not low <= value <= 600:
            raise UsageError(f"{flag} must be in [{low:g}, 600] s, got {value:g}")
    if not 1 <= ns.repeats <= 50:
        raise UsageError(f"--repeats must be in [1, 50], got {ns.repeats}")
    if not 576 <= ns.tun_mtu <= 65535:
        raise UsageError(f"--tun-mtu must be in [576, 65535], got {ns.tun_mtu}")
    if not 256 <= ns.mtu <= ns.tun_mtu - 100:
        raise UsageError(f"--mtu must be in [256, tun-mtu - 100], got {ns.mtu}")
    if ns.forwarder not in FORWARDERS:
        names = f"{', '.join(FORWARDERS[:-1])} or {FORWARDERS[-1]}"
        raise UsageError(f"--forwarder must be {names}, got {ns.forwarder!r}")


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Parse and validate; a bad value is a :class:`UsageError` with a one-line message."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.quick:
        _apply_quick(ns, parser)
    _check_numbers(ns)
    rate = _unit("--rate", ns.rate, parse_rate)
    rtt = _unit("--rtt", ns.rtt, parse_time)
    if not 1e6 <= rate <= 1e11 or not 1e-4 <= rtt <= 1.0:
        raise UsageError("--rate must be in [1Mbit/s, 100Gbit/s] and --rtt in [0.1ms, 1s]")
    if ns.scheme not in SDR_SCHEMES:
        raise UsageError(f"--scheme must be one of {list(SDR_SCHEMES)}, got {ns.scheme!r}")

    def specs(flag: str, text: str) -> list[ControllerSpec]:
        found = [parse_controller(item, rate) for item in _split(text)]
        if not found:
            raise UsageError(f"{flag} needs at least one controller, got {text!r}")
        return found

    return Options(
        scenarios=_choices("--scenarios", ns.scenarios, SCENARIOS),
        rate=rate,
        rtt=rtt,
        buffers=_floats("--buffers", ns.buffers, 0.05, 10.0),
        tcp=_choices("--tcp", ns.tcp, TCP_KINDS),
        controllers=specs("--controllers", ns.controllers),
        loss_controllers=specs("--loss-controllers", ns.loss_controllers),
        pair_controllers=specs("--pair-controllers", ns.pair_controllers),
        losses=_floats("--losses", ns.losses, 0.0, 0.2),
        scheme=ns.scheme,
        size=_unit("--size", ns.size, parse_size),
        loss_size=_unit("--loss-size", ns.loss_size, parse_size),
        repeats=ns.repeats,
        lead=ns.lead,
        pair_lead=ns.pair_lead,
        settle=ns.settle,
        tail=ns.tail,
        tcp_seconds=ns.tcp_seconds,
        tcp_buffer=_unit("--tcp-buffer", ns.tcp_buffer, parse_size),
        message_size=_unit("--message-size", ns.message_size, parse_size),
        mtu=ns.mtu,
        chunk=_unit("--chunk", ns.chunk, parse_size),
        tun_mtu=ns.tun_mtu,
        sdr_timeout=ns.sdr_timeout,
        global_timeout=ns.global_timeout,
        forwarder=ns.forwarder,
        seed=ns.seed,
        quick=ns.quick,
        json=ns.json,
        plot=ns.plot,
        argv=argv,
    )
