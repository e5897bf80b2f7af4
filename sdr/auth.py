"""Authenticated connection set-up: QP info signed with a shared secret (HMAC-SHA256).

When both contexts are given the same ``secret``, ``qp.info()`` carries a random nonce and
an HMAC over the whole info, and ``qp.connect()`` refuses info whose HMAC does not verify
(forged, altered in transit, or from a peer without the secret). Together with QPNs and
rkeys drawn at random per connection, a stray or forged peer cannot join or address a
QP. The info exchange itself must still be fresh (as with any pre-shared key without a
challenge); run it over a channel you trust for ordering, e.g. the job's launcher, or
wrap it in a challenge-response as ``sdr send/recv`` do (sdr/cli/transfer_setup.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

from sdr.errors import ConfigError, RemoteProtocolError

__all__ = ["sign_info", "verify_info", "check_secret"]

_FIELD = "hmac"


def check_secret(secret: bytes | str | None) -> bytes | None:
    """Validate a shared secret (>= 16 bytes); str is UTF-8 encoded."""
    if secret is None:
        return None
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(raw) < 16:
        raise ConfigError(f"shared secret must be at least 16 bytes, got {len(raw)}")
    return raw


def _digest(body: dict[str, Any], secret: bytes) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, canonical, hashlib.sha256).hexdigest()


def sign_info(
    body: dict[str, Any], secret: bytes | None, nonce: str | None = None
) -> dict[str, Any]:
    """The info with a nonce and HMAC added (unchanged without a secret). ``nonce``: a
    fixed one for reproducible tests and fuzzing; by default 16 fresh random bytes."""
    if secret is None:
        return body
    signed = dict(body, nonce=secrets.token_hex(16) if nonce is None else nonce)
    signed[_FIELD] = _digest(signed, secret)
    return signed


def verify_info(info: dict[str, Any], secret: bytes | None) -> dict[str, Any]:
    """Check the HMAC when a secret is configured; ProtocolError when it fails."""
    if secret is None:
        return info
    tag = info.get(_FIELD)
    if not isinstance(tag, str) or not tag.isascii():  # compare_digest takes ASCII text only
        raise RemoteProtocolError(
            "peer info is not authenticated, but this context requires a secret"
        )
    body = {k: v for k, v in info.items() if k != _FIELD}
    if not hmac.compare_digest(tag, _digest(body, secret)):
        raise RemoteProtocolError("peer info failed authentication (wrong secret or altered info)")
    return body
