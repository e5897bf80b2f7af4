"""Validated parameters of a reliability scheme, and the ``[reliability]`` TOML table.

Times accept the units syntax of :mod:`sdr.units` (``"25ms"``), rates ``"100Gbit/s"``,
sizes ``"64KiB"``. Stored values are seconds, bits/s and bytes. Both ends of a
connection must use the same scheme, k, m and chunk size (the DIGEST carries a
fingerprint of them and a mismatch fails the message with a ProtocolError).

Example ``sdr.toml``::

    [reliability]
    scheme = "ec-mds"
    rtt = "25ms"
    alpha = 2.0
    k = 32
    m = 8
    link_rate = "400Gbit/s"
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from sdr.congestion.registry import check_congestion_name
from sdr.errors import ConfigError
from sdr.reliability.registry import check_scheme_name
from sdr.units import parse_rate, parse_size, parse_time

__all__ = ["ReliabilityConfig", "load", "loads"]

_MIN_TIMEOUT_S = 60.0  # a descheduled peer (a GC pause, a loaded host) is not dead
_MAX_RTT_S = 3600.0  # an hour: beyond any path on Earth or to a satellite
_BARE_RTT_S = 2.0
"""A unitless rtt this large in a file is refused: no link on Earth has it, "30" meant ms."""
_MAX_RTTS = 1000.0  # alpha and beta, in RTTs
_MIN_RATE = 1e3  # bits/s
_MAX_CHUNK = 1 << 40
_TIMEOUT_RTOS = 100
_TIMEOUT_TX = 4
SACKS_PER_RTT = 10
"""The default SACK interval is rtt / this where SACKs feed a controller or a selector."""
SACKS_PER_RTT_FIXED = 2
"""... and rtt / this with ``fixed`` on one path while no posted receive has a hole, where
SACKs only retire data and time the RTO: every SACK costs both ends a progress round, and
at 1 Gbit/s on loopback rtt/4 took 7-17% of the sender's CPU per byte and 20-22% of the
receiver's off rtt/10's (docs/benchmarks.md, "CPU per byte, round 7"); rtt/2 takes
another 18% of the receiver's off rtt/4's (round 11)."""
SACKS_PER_RTT_GAPPED = 4
"""... and rtt / this there while a receive has a hole (a loss under repair), as TCP acks
out-of-order data at once (RFC 5681): the hole's NACK, and the SACKs that time its
repair, wait no longer than they did with rtt/4 throughout."""


def _number(name: str, value: object, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    try:
        result = float(value)
    except OverflowError:  # an int beyond float range (TOML integers are unbounded)
        raise ConfigError(f"{name} must be a finite number, got {len(str(value))} digits") from None
    if not math.isfinite(result):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if not low <= result <= high:
        raise ConfigError(f"{name} must be in [{low}, {high}], got {value!r}")
    return result


def _integer(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


# attrs converters: the constructor takes numbers or units strings, the attributes hold
# seconds, bytes and bits/s (one type per field)
def _rtt(value: float | str) -> float:
    rtt = parse_time(value, field="rtt")
    if not 0 < rtt <= _MAX_RTT_S:
        raise ConfigError(f"rtt must be in (0, 1 h] (e.g. '25ms'), got {value!r}")
    return rtt


def _chunk_size(value: int | str | None) -> int | None:
    if value is None:
        return None
    size = parse_size(value, field="chunk_size")
    if not 1 <= size <= _MAX_CHUNK:
        raise ConfigError(f"chunk_size must be in [1 B, 1 TiB], got {value!r}; e.g. '64KiB'")
    return size


def _link_rate(value: float | str | None) -> float | None:
    if value is None:
        return None
    rate = parse_rate(value, field="link_rate")
    if rate < _MIN_RATE:
        raise ConfigError(f"link_rate must be >= 1 kbit/s, got {value!r}; e.g. '10Gbit/s'")
    return rate


def _ack_interval(value: float | str | None) -> float | None:
    return None if value is None else parse_time(value, field="ack_interval")


_MAX_SMALL_COPIES = 4


def _small_copies(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_SMALL_COPIES:
        raise ConfigError(
            f"small_copies must be an integer in 1..{_MAX_SMALL_COPIES}, got {value!r}"
        )
    return value


def _global_timeout(value: float | str | None) -> float | None:
    if value is None:
        return None
    seconds = parse_time(value, field="global_timeout")
    if seconds <= 0:
        raise ConfigError(f"global_timeout must be > 0 s, got {value!r}; e.g. '30s'")
    return seconds


@attrs.frozen
class ReliabilityConfig:
    """Parameters of a reliability scheme (see docs/reliability-schemes.md).

    scheme: registered name: ``sr-rto``, ``sr-nack``, ``ec-mds``, ``ec-xor``, your own, or
        ``auto`` (resolved through the selector when a ReliableQP is built; see
        :mod:`sdr.runtime.auto_scheme`).
    rtt: round-trip time of the link in seconds (the user knows the link).
    alpha: queueing allowance; per-chunk RTO = rtt + alpha * rtt.
    beta: EC fallback margin; FTO = (M + ceil(M/R)) * T_INJ + beta * rtt (default alpha/2).
    k, m: EC data and parity chunks per submessage.
    chunk_size: bytes per chunk; None takes the QP's bitmap chunk size (it must match it).
    link_rate: bits/s for T_INJ = chunk bits / link_rate; None takes the QP's rate_limit
        (T_INJ = 0 when neither is set).
    ack_interval: how long a receiver may delay a SACK to coalesce arrivals (default: see
        :attr:`ack_delay`; the SACK says how long it held, and the sender's congestion
        controller gets its RTT samples without it).
    global_timeout: T, seconds without progress (no chunk newly acknowledged or arrived)
        after which a message fails with sdr.TimeoutError; a message that moves never
        fails by a timer. None: max(60 s, 100 RTOs) + 4x the message's transmit time at
        link_rate (a peer descheduled for seconds is not a dead one). The backed-off
        RTO grows to at most min(60 s, T/4).
    max_in_flight: reliable messages in flight per direction (more writes wait).
    max_queued: writes that may wait beyond max_in_flight; one more raises ResourceBusy
        (backpressure). None: no limit (the queue holds handles, never copies).
    congestion: the congestion controller (docs/congestion.md): ``fixed`` (pace at
        link_rate / rate_limit, today's behaviour), ``delay``, ``bbr``, one registered in
        the ``sdr.congestion`` group, or ``auto`` (``delay`` with a rate, ``bbr`` without).
    congestion_params: keyword parameters for the controller (``max_rate``, a ceiling
        above the configured rate, is one every controller takes).
    multipath: treat the QP's channels as paths (the UDP backend sends each from its own
        source port): each chunk takes one path, picked by per-path loss and delay, and
        traffic moves off a worse path (docs/congestion.md, "Multipath").
    small_copies: a message of one chunk is sent this many times (each packet back to
        back), and its CTS and DIGEST too: a repetition code for tiny messages (a
        collective's notes, a flag) whose loss would otherwise cost an RTO,
        rtt * (1 + alpha); 1 sends each once.
    final_check: check every chunk's CRC once more when a receive is declared final
        (docs/reliability.md, "Integrity"). None (default): only where the driver cannot
        refuse a write into a verified chunk (``guards_placement`` False: verbs, whose
        NIC writes payload itself); a driver that seals verified chunks (every software
        driver) lets no write change them, and the second pass over the whole message
        costs the receiver a tenth of its CPU per byte. True: always (defence in depth
        against whatever writes the buffer behind the driver's back); False: never.
    params: extra parameters for user-registered schemes.
    """

    scheme: str = "sr-rto"
    rtt: float = attrs.field(default=0.001, converter=_rtt)
    alpha: float = 2.0
    beta: float | None = None
    k: int = 32
    m: int = 8
    chunk_size: int | None = attrs.field(default=None, converter=_chunk_size)
    link_rate: float | None = attrs.field(default=None, converter=_link_rate)
    ack_interval: float | None = attrs.field(default=None, converter=_ack_interval)
    global_timeout: float | None = attrs.field(default=None, converter=_global_timeout)
    max_in_flight: int = 16
    max_queued: int | None = None
    congestion: str = "fixed"
    congestion_params: Mapping[str, Any] = attrs.field(factory=dict)
    multipath: bool = False
    small_copies: int = attrs.field(default=1, converter=_small_copies)
    final_check: bool | None = None
    params: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.scheme, str) or not self.scheme:
            raise ConfigError(f"scheme must be a scheme name like 'sr-rto', got {self.scheme!r}")
        # rtt is bounded (its converter) so that every derived timer stays finite
        set_(self, "alpha", _number("alpha", self.alpha, 0.0, _MAX_RTTS))
        if self.beta is not None:
            set_(self, "beta", _number("beta", self.beta, 0.0, _MAX_RTTS))
        set_(self, "k", _integer("k", self.k, 1, 255))
        set_(self, "m", _integer("m", self.m, 1, 255))
        set_(self, "max_in_flight", _integer("max_in_flight", self.max_in_flight, 1, 1 << 16))
        if self.max_queued is not None:
            set_(self, "max_queued", _integer("max_queued", self.max_queued, 0, 1 << 30))
        set_(self, "congestion", check_congestion_name(self.congestion))
        if not isinstance(self.congestion_params, Mapping):
            raise ConfigError(
                f"congestion_params must be a table/mapping, got {self.congestion_params!r}"
            )
        set_(self, "congestion_params", dict(self.congestion_params))
        if self.final_check is not None and not isinstance(self.final_check, bool):
            raise ConfigError(f"final_check must be true or false, got {self.final_check!r}")
        if not isinstance(self.multipath, bool):
            raise ConfigError(f"multipath must be true or false, got {self.multipath!r}")
        if not isinstance(self.params, Mapping):
            raise ConfigError(f"params must be a table/mapping, got {self.params!r}")
        set_(self, "params", dict(self.params))

    # --- derived values (all in seconds) -----------------------------------------------
    @property
    def rto(self) -> float:
        """Per-chunk retransmission timeout: rtt + alpha * rtt."""
        return self.rtt * (1.0 + self.alpha)

    @property
    def beta_value(self) -> float:
        """beta, defaulting to alpha / 2 as in the paper."""
        return self.alpha / 2 if self.beta is None else self.beta

    @property
    def ack_delay(self) -> float:
        """Longest a receiver holds back a SACK: ``ack_interval``; by default
        :data:`SACKS_PER_RTT_FIXED` per RTT with the ``fixed`` controller on one path
        (:attr:`ack_delay_gapped` while a receive has a hole), :data:`SACKS_PER_RTT` where
        a congestion controller or the path selector feeds on the SACKs (RTT samples,
        delivery rates)."""
        if self.ack_interval is not None:
            return self.ack_interval
        if self.congestion == "fixed" and not self.multipath:
            return self.rtt / SACKS_PER_RTT_FIXED
        return self.rtt / SACKS_PER_RTT

    @property
    def ack_delay_gapped(self) -> float:
        """:attr:`ack_delay` while a receive has a hole: :data:`SACKS_PER_RTT_GAPPED` per
        RTT where the default is :data:`SACKS_PER_RTT_FIXED`, else the same."""
        if self.ack_interval is None and self.congestion == "fixed" and not self.multipath:
            return self.rtt / SACKS_PER_RTT_GAPPED
        return self.ack_delay

    @property
    def t_inj(self) -> float:
        """Injection time of one chunk at link_rate (0 when the rate is unknown)."""
        if self.link_rate is None or self.chunk_size is None:
            return 0.0
        return self.chunk_size * 8 / self.link_rate

    def fto(self, data_chunks: int, parity_chunks: int) -> float:
        """EC fallback timeout, armed at the first chunk: (M + P) * T_INJ + beta * rtt."""
        return (data_chunks + parity_chunks) * self.t_inj + self.beta_value * self.rtt

    def timeout_for(self, length: int) -> float:
        """Global (no-progress) timeout of one message of ``length`` bytes."""
        if self.global_timeout is not None:
            return self.global_timeout
        tx = length * 8 / self.link_rate if self.link_rate else 0.0
        return max(_MIN_TIMEOUT_S, _TIMEOUT_RTOS * self.rto) + _TIMEOUT_TX * tx

    @property
    def stall_timeout(self) -> float:
        """How long the connection may go without progress (a chunk newly acknowledged or
        arrived, of any message) before a message that waits its turn behind others fails:
        every bit of progress moves every message's deadline on by this much (a controller
        may pace far below ``link_rate``, and a fixed rate shares itself between messages)."""
        return self.timeout_for(0)

    def replace(self, **changes: Any) -> ReliabilityConfig:
        """A copy with some fields changed (validated again)."""
        return attrs.evolve(self, **changes)

    def resolved(self, chunk_size: int, rate_limit: float | None) -> ReliabilityConfig:
        """Fill chunk_size and link_rate from the QP; ConfigError if chunk_size disagrees."""
        if self.chunk_size is not None and self.chunk_size != chunk_size:
            raise ConfigError(
                f"reliability chunk_size {self.chunk_size} must equal the QP's chunk_size "
                f"{chunk_size} (one bitmap bit per chunk); leave it unset to inherit it"
            )
        rate = self.link_rate if self.link_rate is not None else rate_limit
        return self.replace(chunk_size=chunk_size, link_rate=rate)

    @classmethod
    def coerce(
        cls, config: ReliabilityConfig | str | Mapping[str, Any] | None, **overrides: Any
    ) -> ReliabilityConfig:
        """A config from a config, a scheme name, a mapping or None, with fields overridden."""
        if config is None:
            return cls(**overrides)
        if isinstance(config, str):
            return cls(scheme=config, **overrides)
        if isinstance(config, Mapping):
            return cls.from_mapping({**config, **overrides})
        if isinstance(config, cls):
            return config.replace(**overrides) if overrides else config
        raise ConfigError(
            f"config must be a ReliabilityConfig, a scheme name or a mapping, got {config!r}"
        )

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> ReliabilityConfig:
        """Build from a mapping (a parsed ``[reliability]`` table); unknown keys are errors.

        The scheme must be registered or ``auto`` (ConfigError listing the known names).
        """
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            near = {k: difflib.get_close_matches(str(k), known, n=1, cutoff=0.7) for k in unknown}
            hints = "".join(f"; {k!r}: did you mean {m[0]!r}?" for k, m in near.items() if m)
            raise ConfigError(
                f"unknown [reliability] keys {unknown}{hints}; expected some of {sorted(known)} "
                "(put parameters of your own scheme under [reliability.params])"
            )
        if "scheme" in table:
            check_scheme_name(table["scheme"])
        rtt = table.get("rtt")
        if isinstance(rtt, int | float) and not isinstance(rtt, bool) and rtt >= _BARE_RTT_S:
            shown = str(rtt) if len(str(rtt)) <= 20 else f"{str(rtt)[:17]}..."
            raise ConfigError(
                f"rtt = {shown} reads as {shown} s (a bare number is seconds): write "
                f'rtt = "{shown}ms" for milliseconds, or "{shown}s" if you mean seconds'
            )
        return cls(**dict(table))


def _from_document(doc: Mapping[str, Any]) -> ReliabilityConfig:
    if "reliability" not in doc:  # the document is the table itself: no other sections
        sections = [k for k, v in doc.items() if isinstance(v, Mapping) and k != "params"]
        if sections:
            near = difflib.get_close_matches("reliability", sections, n=1, cutoff=0.6)
            hint = f"; did you mean [reliability] for [{near[0]}]?" if near else ""
            found = ", ".join(f"[{name}]" for name in sections)
            raise ConfigError(f"no [reliability] table, found {found}{hint}")
    table = doc.get("reliability", doc)
    if not isinstance(table, Mapping):
        raise ConfigError(f"[reliability] must be a table, got {table!r}")
    return ReliabilityConfig.from_mapping(table)


def loads(text: str) -> ReliabilityConfig:
    """The ``[reliability]`` table of TOML ``text`` (like :func:`tomllib.loads`).

    A document without a ``reliability`` table is taken as the table itself.
    """
    if not isinstance(text, str):
        raise ConfigError(f"reliability config text must be a str, got {type(text).__name__}")
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # nesting too deep
        raise ConfigError(f"reliability config is not valid TOML: {exc}") from exc
    return _from_document(doc)


def load(path: str | Path) -> ReliabilityConfig:
    """The ``[reliability]`` table of the TOML file at ``path`` (any name, e.g. ``sdr.conf``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read reliability config {str(path)!r}: {exc}") from exc
    return loads(text)
