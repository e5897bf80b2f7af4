"""The end-to-end file digest of ``sdr send``/``sdr recv`` (sdr.cli.transfer_digest):
the values match the standard tools' and a malformed closing message is refused."""

from __future__ import annotations

import hashlib

import blake3
import numpy as np
import pytest

from sdr.cli.transfer_digest import DIGESTS, check_digest, file_digest, peer_digest
from sdr.errors import ConfigError, ProtocolError


@pytest.mark.parametrize("size", [0, 1, 1 << 20, (16 << 20) + 7])  # the last one threaded
def test_digests_match_the_reference_implementations(size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    raw = data.tobytes()
    assert file_digest(data, "blake3") == blake3.blake3(raw).hexdigest()
    assert file_digest(memoryview(raw), "sha256") == hashlib.sha256(raw).hexdigest()
    assert file_digest(data, "none") is None


def test_one_changed_byte_changes_the_digest() -> None:
    data = bytearray(4096)
    before = file_digest(data, "blake3")
    data[4000] ^= 1
    assert file_digest(data, "blake3") != before


def test_an_unknown_digest_is_a_config_error() -> None:
    assert [check_digest(d) for d in DIGESTS] == list(DIGESTS)
    with pytest.raises(ConfigError, match="--digest must be one of blake3, sha256, none"):
        check_digest("md5")


@pytest.mark.parametrize(
    "done",
    [
        None,
        {"done": True},  # no algorithm
        {"done": True, "digest_algorithm": "md5", "digest": "00"},
        {"done": True, "digest_algorithm": "blake3", "digest": None},
        {"done": True, "digest_algorithm": "blake3", "digest": 5},
        {"done": True, "digest_algorithm": "none", "digest": "ab"},
        {"done": True, "digest_algorithm": ["blake3"], "digest": "ab"},
    ],
)
def test_a_malformed_closing_message_is_a_protocol_error(done: object) -> None:
    with pytest.raises(ProtocolError, match="the sender's"):
        peer_digest(done)


def test_a_well_formed_closing_message_gives_algorithm_and_digest() -> None:
    assert peer_digest({"done": True, "digest_algorithm": "sha256", "digest": "ab"}) == (
        "sha256",
        "ab",
    )
    assert peer_digest({"done": True, "digest_algorithm": "none", "digest": None}) == (
        "none",
        None,
    )
