"""``sdr send``'s plan for ``scheme = "auto"``: one config file, one answer.

The loss ``auto`` picks for comes from ``--loss`` when given, else the ``--config`` file's
``[reliability.params] drop`` (what ``ReliableQP`` reads from the same file), else 1e-3.
No network: the plan is made before any socket exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sdr.cli.transfer_options import (
    DEFAULT_LOSS,
    TransferOptions,
    merged_config,
    message_bytes,
    plan,
    qp_attr,
)
from sdr.errors import ConfigError
from sdr.reliability.config import load
from sdr.runtime.auto_scheme import resolve

MESSAGE = 1 << 20


def _file(tmp_path: Path, drop: str | None) -> str:
    params = "" if drop is None else f"\n[reliability.params]\ndrop = {drop}\n"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "auto.toml"
    path.write_text(
        '[reliability]\nscheme = "auto"\nrtt = "25ms"\nlink_rate = "1Gbit/s"\n' + params
    )
    return str(path)


def _scheme(opts: TransferOptions) -> str:
    config, _ = plan(opts, 64 * MESSAGE)
    return config.scheme


def _reliable_qp_scheme(path: str, opts: TransferOptions, drop: float | None = None) -> str:
    """The scheme ReliableQP resolves for the same file on the same QP shape, for one
    write of the transfer's size (``sdr send`` judges the stream of pieces as one)."""
    attr = qp_attr(opts, merged_config(opts))
    config = load(path).resolved(attr.chunk_size, attr.rate_limit)
    return resolve(config, mtu=attr.mtu, drop=drop, size_hint=64 * MESSAGE).scheme


@pytest.mark.parametrize("drop", ["0.0", "1e-2"])
def test_auto_uses_the_files_drop_as_reliable_qp_does(tmp_path: Path, drop: str) -> None:
    path = _file(tmp_path, drop)
    opts = TransferOptions(config=path, message_size=MESSAGE)
    assert _scheme(opts) == _reliable_qp_scheme(path, opts)


def test_the_files_drop_decides_and_the_flag_overrides_it(tmp_path: Path) -> None:
    lossless, lossy = _file(tmp_path / "a", "0.0"), _file(tmp_path / "b", "1e-2")
    by_file = {
        p: _scheme(TransferOptions(config=p, message_size=MESSAGE)) for p in (lossless, lossy)
    }
    # the two drops pick different schemes here, so the file's value is what decided
    assert by_file[lossless] != by_file[lossy]
    flagged = TransferOptions(config=lossless, message_size=MESSAGE, loss=1e-2)
    assert _scheme(flagged) == by_file[lossy]


def test_without_a_drop_anywhere_auto_expects_the_default_loss(tmp_path: Path) -> None:
    path = _file(tmp_path, None)
    opts = TransferOptions(config=path, message_size=MESSAGE)
    assert _scheme(opts) == _reliable_qp_scheme(path, opts, drop=DEFAULT_LOSS)


def test_a_files_drop_out_of_range_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _file(tmp_path, "1.5")
    with pytest.raises(ConfigError, match=r"drop must be in \[0, 1\)"):
        plan(TransferOptions(config=path, message_size=MESSAGE), MESSAGE)


@pytest.mark.parametrize(
    ("loss", "mtu", "chunk"),
    [
        (0.0, 4096, 64 << 10),  # a clean link keeps the paper's 64 KiB
        (1e-4, 4096, 64 << 10),
        (1e-3, 4096, 32 << 10),  # 8 packets: 0.7% resent for nothing
        (1e-3, 8192, 64 << 10),
        (1e-2, 4096, 8 << 10),  # 2 packets
        (5e-2, 8192, 8 << 10),  # one packet: nothing smaller
        (1e-2, 100_000, 100_000),  # a packet larger than 64 KiB is the chunk
    ],
)
def test_the_chunk_follows_the_expected_loss(loss: float, mtu: int, chunk: int) -> None:
    from sdr.cli.transfer_options import REPAIR_OVERHEAD, chunk_for_loss

    got = chunk_for_loss(loss, mtu)
    assert got == chunk
    n = got // mtu
    assert (n - 1) * loss <= REPAIR_OVERHEAD or n == 1  # what a lost packet resends for nothing


def test_a_transfer_picks_its_chunk_from_the_loss_unless_told(tmp_path: Path) -> None:
    lossy = TransferOptions(message_size=MESSAGE, mtu=8192, loss=1e-2)
    assert merged_config(lossy).chunk_size == 16 << 10
    assert qp_attr(lossy, merged_config(lossy)).chunk_size == 16 << 10  # the QP's, too
    assert merged_config(TransferOptions(mtu=8192, loss=0.0)).chunk_size == 64 << 10
    told = TransferOptions(message_size=MESSAGE, mtu=8192, loss=1e-2, chunk_size="64KiB")
    assert merged_config(told).chunk_size == 64 << 10  # --chunk wins
    path = tmp_path / "c.toml"
    path.write_text('[reliability]\nchunk_size = "32KiB"\n[reliability.params]\ndrop = 1e-2\n')
    assert merged_config(TransferOptions(config=str(path), mtu=8192)).chunk_size == 32 << 10
    path.write_text("[reliability]\n[reliability.params]\ndrop = 1e-2\n")  # the file's drop
    assert merged_config(TransferOptions(config=str(path), mtu=8192)).chunk_size == 16 << 10


def test_auto_judges_the_stream_of_pieces_not_one_piece() -> None:
    """Judged per 64 MiB piece at 100 ms and loss 1e-2, auto picked ec-mds: 25% parity on
    every byte, 6.7 s for 256 MiB on the emulated 1 Gbit/s link where sr-nack took 2.7 s
    (its repair round trip overlaps the next piece; only the last one's shows)."""
    opts = TransferOptions(rtt="100ms", rate="1Gbit/s", loss=1e-2, message_size="64MiB")
    config, selection = plan(opts, 256 << 20)
    assert config.scheme.startswith("sr-"), selection.ranking[:3]


@pytest.mark.parametrize(
    ("rate", "rtt", "mtu", "expected"),
    [
        ("1Gbit/s", "100ms", 4096, 64 << 20),  # 4 x 12.5 MB, rounded up
        ("1Gbit/s", "25ms", 4096, 16 << 20),  # 4 x the defaults' 3.1 MB
        ("100Mbit/s", "10ms", 4096, 1 << 20),  # 0.5 MB: never below 1 MiB
        ("100Gbit/s", "100ms", 4096, 64 << 20),  # nor above 64 MiB
        ("100Gbit/s", "100ms", 64, 16 << 20),  # nor above what the offsets address
    ],
)
def test_auto_messages_hold_four_bandwidth_delay_products(rate, rtt, mtu, expected) -> None:
    opts = TransferOptions(rate=rate, rtt=rtt, mtu=mtu)
    assert opts.message_size == "auto"  # the default
    assert message_bytes(opts, merged_config(opts)) == expected
    assert qp_attr(opts, merged_config(opts)).max_message_size == expected
    told = TransferOptions(rate=rate, rtt=rtt, mtu=mtu, message_size="3MiB")
    assert message_bytes(told, merged_config(told)) == 3 << 20


@pytest.mark.parametrize("bad", ["banana", "0", "-1MiB", ""])
def test_a_bad_message_size_is_refused_naming_the_flag(bad) -> None:
    opts = TransferOptions(message_size=bad)
    with pytest.raises(ConfigError, match="--message-size must be a size such as 16MiB, or auto"):
        message_bytes(opts, merged_config(opts))
