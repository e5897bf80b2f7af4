"""What a file transfer uses: its options, the merged reliability config and the QP shape.

A reliability field comes from the command line, else the ``--config`` file's
``[reliability]`` table, else :data:`DEFAULTS`; ``auto`` is resolved by the simulator's
selector. Everything here is checked before the network is touched.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sdr
from sdr.auth import check_secret
from sdr.backends.udp.transport import MAX_PATHS
from sdr.cli.defaults import DEFAULT_MTU
from sdr.cli.transfer_digest import DEFAULT_DIGEST, check_digest
from sdr.errors import ConfigError
from sdr.reliability import ReliabilityConfig
from sdr.reliability.config import load
from sdr.reliability.registry import available_schemes, create_scheme
from sdr.runtime.auto_scheme import check_drop
from sdr.units import format_size, parse_rate, parse_size

__all__ = [
    "DEFAULTS",
    "DEFAULT_LOSS",
    "Progress",
    "TransferOptions",
    "merged_config",
    "plan",
    "qp_attr",
    "validate_send",
]

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes total) as the transfer advances."""


# What a transfer uses for a reliability field that neither the command line nor the
# ``--config`` file sets (a flag overrides the file, the file overrides these).
DEFAULTS: dict[str, Any] = {
    "scheme": "auto",
    "rtt": "25ms",
    "link_rate": "1Gbit/s",
    "alpha": 2.0,
}
DEFAULT_LOSS = 1e-3
"""The packet loss ``auto`` expects when neither ``--loss`` nor the file's ``drop`` says."""
REPAIR_OVERHEAD = 0.01
"""What chunk-granular repair may resend beyond the lost packets, at the expected loss,
when the chunk size is left to the transfer (:func:`chunk_for_loss`)."""
STREAM_JUDGED = 1 << 30
"""The most of a transfer ``auto`` judges as one stream (:func:`plan`)."""
LARGEST_CHUNK = 64 << 10
"""The largest chunk a transfer picks by itself (the paper's default)."""


def chunk_for_loss(loss: float, mtu: int) -> int:
    """The chunk size a transfer uses when none is given: the largest power-of-two number
    of packets, at most :data:`LARGEST_CHUNK` bytes (at least one packet), whose repairs
    resend at most :data:`REPAIR_OVERHEAD` of the data beyond what was lost.

    A lost packet costs its whole chunk: at packet loss ``p`` a chunk of ``n`` packets
    resends about ``(n - 1) p`` of the data for nothing. Measured on the emulated link
    (256 MiB, 1 Gbit/s, 25 ms, loss 1e-2, 4 KiB packets, sr-nack): 64 KiB chunks resent
    15% of the file and took 2.60 s, 16 KiB 4% and 2.41 s, 4 KiB 1.1% and 2.35 s (TCP BBR
    2.44 s). Small chunks cost more bookkeeping per byte, so a clean link keeps 64 KiB.
    """
    n = 1
    while 2 * n * mtu <= LARGEST_CHUNK and (2 * n - 1) * loss <= REPAIR_OVERHEAD:
        n *= 2
    return n * mtu


@dataclass
class TransferOptions:
    """How to move a file. Sizes, rates and times accept units.

    The reliability fields (scheme, rate, rtt, alpha, chunk_size, k, m) left at None take
    the value of the ``[reliability]`` table in ``config`` when it sets one, else
    :data:`DEFAULTS`; a value given here overrides the file.
    """

    scheme: str | None = None
    rate: str | float | None = None
    rtt: str | float | None = None
    congestion: str | None = None
    """The congestion controller (``ReliabilityConfig.congestion``)."""
    loss: float | None = None
    """The expected packet loss ``auto`` picks the scheme for; None: the ``--config``
    file's ``[reliability.params] drop``, else :data:`DEFAULT_LOSS`."""
    message_size: str | int = "auto"
    """Bytes per reliable message, or ``auto`` (:func:`message_bytes`)."""
    mtu: str | int = DEFAULT_MTU
    chunk_size: str | int | None = None
    channels: int = 2
    paths: int = 1
    """UDP data ports (paths) per side; more than one turns on multipath (each channel
    goes to its own port; at least ``paths`` channels)."""
    alpha: float | None = None
    k: int | None = None
    m: int | None = None
    config: str | None = None
    secret: str | None = None
    timeout: float = 300.0
    relay: str | None = None
    """A map file of ``sdr emulate relay --map``: the UDP data crosses the relay."""
    digest: str = DEFAULT_DIGEST
    """The end-to-end file digest (:mod:`~sdr.cli.transfer_digest`)."""
    tail: bool = True
    """When ``auto`` picks SR, send the file's last bandwidth-delay product as a message
    under erasure coding (:mod:`~sdr.cli.transfer_tail`)."""
    extra: dict[str, Any] = field(default_factory=dict)


def _file_table(path: str) -> dict[str, Any]:
    """The keys that the ``[reliability]`` table of ``path`` sets (validated)."""
    load(path)  # ConfigError for a missing file, bad TOML, unknown keys, bad values
    with open(path, "rb") as fh:
        doc = tomllib.load(fh)
    return dict(doc.get("reliability", doc))


def check_paths(paths: object) -> int:
    """``paths`` if it is a number of UDP data ports in [1, MAX_PATHS], else ConfigError."""
    if isinstance(paths, bool) or not isinstance(paths, int) or not 1 <= paths <= MAX_PATHS:
        raise ConfigError(f"--paths must be an integer in [1, {MAX_PATHS}], got {paths!r}")
    return paths


def merged_config(opts: TransferOptions) -> ReliabilityConfig:
    """The reliability config: :data:`DEFAULTS`, then the file, then the options given."""
    table = dict(DEFAULTS)
    table["global_timeout"] = opts.timeout  # --timeout: no progress for that long fails it
    if opts.config:
        table.update(_file_table(opts.config))
    given = {
        "scheme": opts.scheme,
        "rtt": opts.rtt,
        "link_rate": opts.rate,
        "alpha": opts.alpha,
        "chunk_size": opts.chunk_size,
        "k": opts.k,
        "m": opts.m,
        "congestion": opts.congestion,
        "multipath": True if check_paths(opts.paths) > 1 else None,
    }
    table.update({k: v for k, v in given.items() if v is not None})
    table.update(opts.extra)
    config = ReliabilityConfig.from_mapping(table)
    if config.scheme != "auto" and config.scheme.lower() not in available_schemes():
        raise ConfigError(
            f"unknown scheme {config.scheme!r}; expected auto or one of {available_schemes()}"
        )
    if config.chunk_size is None:  # neither --chunk nor the file: from the expected loss
        loss = expected_loss(opts, config)
        config = config.replace(chunk_size=chunk_for_loss(loss, parse_size(opts.mtu)))
    return config


def expected_loss(opts: TransferOptions, config: ReliabilityConfig) -> float:
    """The packet loss the transfer expects: ``--loss``, else the file's ``drop``, else
    :data:`DEFAULT_LOSS` (checked: a probability)."""
    drop = opts.loss if opts.loss is not None else config.params.get("drop", DEFAULT_LOSS)
    return check_drop(drop)


def plan(opts: TransferOptions, size: int) -> tuple[ReliabilityConfig, Any]:
    """The concrete reliability config for this transfer (``auto`` goes through the
    simulator's selector) and the selection that chose it (or None)."""
    config = merged_config(opts)
    if config.scheme != "auto":
        return config, None
    from sdr.simulator.auto import resolve_auto  # the selector loads SciPy: only when needed

    # the pieces go back to back, so the selector judges the stream, not one piece: SR
    # pays its repair round trip once, at the end (each piece's tail overlaps the next
    # piece's data), EC its parity on every byte. Judged per 64 MiB piece at 100 ms and
    # loss 1e-2 it picked ec-mds, which took 6.7 s for 256 MiB where sr-nack took 2.7 s
    # (docs/benchmarks.md). Past a gigabyte the choice no longer moves.
    stream = min(max(size, 1), STREAM_JUDGED)
    return resolve_auto(
        config,
        size_bytes=stream,
        drop=expected_loss(opts, config),
        mtu=parse_size(opts.mtu),
        chunk_sizes=(_chunk_size(config),),
    )


def _chunk_size(config: ReliabilityConfig) -> int:
    """The config's chunk size: :func:`merged_config` always sets one."""
    if config.chunk_size is None:
        raise ConfigError("the reliability config has no chunk_size; e.g. chunk_size = '64KiB'")
    return config.chunk_size


AUTO_MESSAGE = (1 << 20, 64 << 20)
"""The range of ``--message-size auto``."""

AUTO_BDPS = 4
"""Bandwidth-delay products per message for ``--message-size auto``."""


def message_bytes(opts: TransferOptions, config: ReliabilityConfig) -> int:
    """``opts.message_size`` in bytes; ``auto``: :data:`AUTO_BDPS` bandwidth-delay
    products (the config's rate x rtt) rounded up to a power of two, within
    :data:`AUTO_MESSAGE` and what the immediate's offset bits address at the mtu.

    A reliable QP keeps a fixed number of messages in flight (``max_in_flight``, 16), and
    a message under repair holds its place for a round trip or two, so messages far below
    the BDP starve a long lossy link: 256 MiB at 1 Gbit/s, loss 1e-2 took 1.54-1.73x the
    ideal at 100 ms in 1 MiB messages and 1.07-1.22x in 16 or 64 MiB ones; at 25 ms 1.07-
    1.09x in 1 MiB, 1.04-1.11x in 4 MiB, 1.035-1.043x in 16 or 64 MiB (docs/benchmarks.md,
    "Issue 35, round 16"). A message that holds the BDP also lets the file end in an
    erasure-coded tail (:mod:`~sdr.cli.transfer_tail`)."""
    if opts.message_size != "auto":
        try:
            told = parse_size(opts.message_size)
        except (ConfigError, ValueError, TypeError):
            told = 0
        if told < 1:
            raise ConfigError(
                f"--message-size must be a size such as 16MiB, or auto; got {opts.message_size!r}"
            )
        return told
    low, high = AUTO_MESSAGE
    rate = config.link_rate or parse_rate(DEFAULTS["link_rate"])
    bdp = AUTO_BDPS * rate * config.rtt / 8
    mtu = parse_size(opts.mtu)
    addressed = sdr.QPAttr(mtu=mtu, chunk_size=mtu).layout.max_packets * mtu
    return min(max(low, 1 << max(0, math.ceil(bdp) - 1).bit_length()), high, addressed)


def qp_attr(opts: TransferOptions, config: ReliabilityConfig) -> sdr.QPAttr:
    message = message_bytes(opts, config)
    return sdr.QPAttr(
        mtu=opts.mtu,
        chunk_size=_chunk_size(config),
        max_message_size=message,
        max_messages=63,  # odd: see sdr.id_reuse
        channels=max(opts.channels, check_paths(opts.paths)),
        rate_limit=config.link_rate,
    )


def validate_send(path: str, opts: TransferOptions) -> tuple[bytes | None, int]:
    """Check what :func:`~sdr.cli.transfer_send.send_file` would use without touching the
    network (ConfigError, OSError for an unreadable file); returns the secret and the
    file's size."""
    secret = check_secret(opts.secret)
    check_digest(opts.digest)
    size = os.path.getsize(path)
    with open(path, "rb"):
        pass
    config = merged_config(opts)
    attr = qp_attr(opts, config)
    if config.scheme != "auto":
        check_lanes(create_scheme(config.resolved(attr.chunk_size, attr.rate_limit)), attr, size)
    return secret, size


def check_lanes(scheme: Any, attr: sdr.QPAttr, size: int) -> None:
    """ConfigError, in the user's terms, when a message's lane (EC's parity) would not fit
    ``--message-size`` (before, the receiver failed mid-transfer with "raise
    QPAttr.max_message_size", which ``sdr send`` has no flag for)."""
    message = attr.max_message_size
    piece = min(message, max(size, 1))
    largest = max(scheme.lanes(piece))
    if largest <= message:
        return
    k, m = scheme.config.k, scheme.config.m
    raise ConfigError(
        f"{scheme.name} with k={k}, m={m} sends {m / k:g} parity bytes per data byte: a "
        f"{format_size(piece)} message needs a {format_size(largest)} parity lane, more "
        f"than --message-size {format_size(message)} holds; use m <= k"
    )
