"""The end-to-end digest of a transferred file: the sender hashes its file, the receiver
hashes what landed and publishes it only when the two agree.

The transport already checks every chunk against a CRC-32 the sender computed from its
own bytes (sdr.reliability.integrity), so the digest is a second, independent check:
against a bug that places verified bytes at the wrong offset, and (a CRC being easy to
forge) against bytes a forger made to match. ``blake3`` (the default) is a
cryptographic hash at about 0.2 CPU s per GiB on one x86-64 core with AVX-512,
``sha256`` costs about 1.0 (OpenSSL with SHA-NI; docs/benchmarks.md "CPU per byte"):
a fifth and a seventh of SDR's whole CPU per byte. ``sha256`` matches ``sha256sum``,
``blake3`` matches ``b3sum``; ``none`` leaves the per-chunk CRCs as the only check.
"""

from __future__ import annotations

import hashlib
from typing import Any

import blake3

from sdr.errors import ConfigError, RemoteProtocolError

__all__ = [
    "DEFAULT_DIGEST",
    "DIGESTS",
    "check_digest",
    "file_digest",
    "hasher",
    "peer_digest",
]

DIGESTS = ("blake3", "sha256", "none")
DEFAULT_DIGEST = "blake3"

_THREADED = 16 << 20
"""From this size on BLAKE3 hashes on every core (the same CPU, less wall time)."""


def check_digest(name: object) -> str:
    """``name`` if it is one of :data:`DIGESTS`, else ConfigError."""
    if name not in DIGESTS:
        raise ConfigError(f"--digest must be one of {', '.join(DIGESTS)}, got {name!r}")
    return str(name)


def file_digest(buffer: Any, algorithm: str) -> str | None:
    """The hex digest of ``buffer`` by ``algorithm`` (None for ``none``)."""
    with memoryview(buffer) as view:
        digest = hasher(algorithm, threaded=len(view) >= _THREADED)
        if digest is None:
            return None
        digest.update(view)
        return str(digest.hexdigest())


def hasher(algorithm: str, threaded: bool = True) -> Any | None:
    """A fresh incremental hash by ``algorithm`` (``update``, ``hexdigest``), or None for
    ``none``; ``threaded``: BLAKE3 on every core. The receiver's ring
    (:mod:`~sdr.cli.transfer_ring`) feeds it the pieces in file order as it writes them,
    so the digest is ready when the last one lands."""
    if algorithm == "blake3":
        return blake3.blake3(max_threads=blake3.blake3.AUTO if threaded else 1)
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm == "none":
        return None
    raise ValueError(f"unknown digest {algorithm!r}")


def peer_digest(done: object) -> tuple[str, str | None]:
    """(algorithm, hex digest) from the sender's closing ``done`` message; ProtocolError
    when it names no algorithm this side knows or its digest is not a string."""
    algorithm = done.get("digest_algorithm") if isinstance(done, dict) else None
    digest = done.get("digest") if isinstance(done, dict) else None
    if algorithm not in DIGESTS:
        raise RemoteProtocolError(
            f"the sender's closing message names digest {algorithm!r}; expected one of "
            f"{', '.join(DIGESTS)}"
        )
    if (digest is None) != (algorithm == "none") or not isinstance(digest, str | None):
        raise RemoteProtocolError(f"the sender's {algorithm} digest is malformed: {digest!r:.80}")
    return str(algorithm), digest
