"""The erasure-coded tail of a file transfer: when it is planned, how the file is cut,
what the hello carries and refuses, the planned policy, and a tail that repairs its own
losses while the bulk repairs by Selective Repeat."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_cli_transfer import _lines, _payload, _receiver, _sender
from test_reliability_support import ATTR, RTT, random_bytes, scripted

import sdr
from sdr.adaptive import Candidate, PlannedPolicy
from sdr.backends.inproc import InprocTransport
from sdr.cli.transfer_options import TransferOptions, chunk_for_loss, plan, qp_attr
from sdr.cli.transfer_peer import SecretMismatch
from sdr.cli.transfer_pieces import PieceWindow, pieces
from sdr.cli.transfer_setup import hello, parse_hello
from sdr.cli.transfer_tail import (
    MAX_CODE,
    REPAIRED_ONCE,
    TAIL_CODES,
    Tail,
    file_tail,
    parse_tail,
    plan_tail,
    policies,
    tail_saving,
)
from sdr.errors import ConfigError, RemoteProtocolError
from sdr.reliability import ReliabilityConfig
from sdr.runtime import ReliableQP, wait_all

MiB = 1 << 20


def _sr(rtt: float, loss: float, rate: str = "1Gbit/s") -> ReliabilityConfig:
    chunk = chunk_for_loss(loss, 4096)
    return ReliabilityConfig.from_mapping(
        {"scheme": "sr-nack", "rtt": rtt, "link_rate": rate, "chunk_size": chunk}
    )


# --- the plan ---------------------------------------------------------------------------
@pytest.mark.parametrize("rtt, loss", [(0.1, 1e-3), (0.05, 1e-3), (0.1, 1e-4)])
def test_a_lossy_long_link_gets_one_bdp_of_tail_under_a_low_overhead_code(rtt, loss) -> None:
    config = _sr(rtt, loss)
    tail = plan_tail(config, 256 * MiB, 64 * MiB, loss, 4096)
    assert tail is not None
    chunk = config.chunk_size
    bdp = 1e9 / 8 * rtt
    assert tail.nbytes % chunk == 0 and bdp <= tail.nbytes < bdp + chunk
    c = tail.candidate
    assert c.scheme.startswith("ec-") and (c.k, c.m) in TAIL_CODES


@pytest.mark.parametrize(
    "config, size, message, loss, why",
    [
        (_sr(0.1, 1e-3), 256 * MiB, 64 * MiB, 1e-6, "a clean link: parity costs more"),
        (_sr(0.1, 1e-3), 256 * MiB, 64 * MiB, 0.0, "no loss expected"),
        (_sr(0.1, 1e-3), 12_500_000, 64 * MiB, 1e-3, "the whole file is one BDP"),
        (_sr(0.025, 1e-3), 256 * MiB, 64 * MiB, 1e-3, "saves 7 ms, costs more"),
        (_sr(0.1, 1e-2), 256 * MiB, 64 * MiB, 1e-2, "repairs lost again: SR's rounds"),
        (_sr(0.025, 1e-2), 256 * MiB, 64 * MiB, 1e-2, "repairs lost again: SR's rounds"),
        (_sr(0.1, 1e-3).replace(scheme="ec-mds"), 256 * MiB, 64 * MiB, 1e-3, "EC already"),
        (_sr(0.1, 1e-3).replace(link_rate=None), 256 * MiB, 64 * MiB, 1e-3, "no rate"),
    ],
)
def test_no_tail_where_it_cannot_help(config, size, message, loss, why) -> None:
    assert plan_tail(config, size, message, loss, 4096) is None, why


@pytest.mark.parametrize("rtt, q", [(0.1, 8e-3), (0.025, 8e-3), (0.1, 1e-3), (0.05, 3e-2)])
def test_the_saving_is_the_expected_wait_for_the_last_loss_of_the_final_rtt(rtt, q) -> None:
    # chunk departures at lam per second, each lost with q: the loss closest to the end
    # of the last RTT of data would have cost rtt - x (x: how long before the end)
    lam = 1e9 / 8 / 32768
    rng = np.random.default_rng(3)
    n = round(lam * rtt)
    lost = rng.random((20_000, n)) < q
    x = np.where(lost.any(axis=1), np.argmax(lost[:, ::-1], axis=1) / lam, rtt)
    again = 1 - (1 - q) ** (lam * q * rtt)
    want = float(np.mean(rtt - x)) * (1 - again)
    got = tail_saving(1e9, rtt, 32768, q)
    if again > REPAIRED_ONCE:
        assert got == 0.0
    else:
        assert got == pytest.approx(want, rel=0.05, abs=2e-4)


def test_no_tail_unless_one_message_holds_the_whole_bdp() -> None:
    # a tail cut into several messages measured slower than none (docs/benchmarks.md)
    assert plan_tail(_sr(0.1, 1e-3), 256 * MiB, 16 * MiB, 1e-3, 4096) is not None
    assert plan_tail(_sr(0.1, 1e-3), 256 * MiB, 4 * MiB, 1e-3, 4096) is None


@pytest.mark.parametrize(
    "changes, planned",
    [({}, True), ({"tail": False}, False), ({"scheme": "sr-nack"}, False)],
)
def test_auto_plans_the_tail_and_a_named_scheme_or_no_tail_does_not(changes, planned) -> None:
    opts = TransferOptions(rtt="100ms", loss=1e-3, message_size="64MiB", **changes)
    config, selection = plan(opts, 256 * MiB)
    assert config.scheme == "sr-nack"
    tail = file_tail(opts, config, selection is not None, 256 * MiB, qp_attr(opts, config))
    assert (tail is not None) == planned


# --- cutting the file ----------------------------------------------------------------------
def test_the_file_is_cut_into_whole_messages_then_the_tail() -> None:
    assert list(pieces(10, 4)) == [(0, 4), (4, 4), (8, 2)]
    assert list(pieces(10, 4, tail=3)) == [(0, 4), (4, 3), (7, 3)]
    assert list(pieces(10, 4, tail=4)) == [(0, 4), (4, 2), (6, 4)]
    assert list(pieces(4, 4, tail=4)) == [(0, 4)]
    with pytest.raises(ValueError, match="tail"):
        PieceWindow(lambda off, n: None, 10, 4, 2, tail=5)


# --- the hello ------------------------------------------------------------------------------
TAIL = Tail(3 * MiB, Candidate("ec-mds", 64, 8))
ATTR_T = sdr.QPAttr(max_message_size=64 * MiB)


def _hello(tail: Tail | dict | None, secret: bytes | None = None, size: int = 256 * MiB) -> dict:
    body = hello("f", size, ATTR_T, {"scheme": "sr-nack"}, "{}", "0" * 32, secret, tail=None)
    if isinstance(tail, Tail):
        return hello("f", size, ATTR_T, {"scheme": "sr-nack"}, "{}", "0" * 32, secret, tail=tail)
    if tail is not None:
        body["tail"] = tail
    return body


def test_the_hello_carries_the_tail_and_a_hello_without_one_has_none() -> None:
    assert parse_hello(_hello(TAIL), "0" * 32, None, 1 << 40).tail == TAIL
    assert parse_hello(_hello(None), "0" * 32, None, 1 << 40).tail is None
    secret = b"s" * 32
    signed = _hello(TAIL, secret)
    assert parse_hello(signed, "0" * 32, secret, 1 << 40).tail == TAIL
    signed["tail"] = dict(signed["tail"], m=1)  # the code is covered by the HMAC
    with pytest.raises(SecretMismatch):
        parse_hello(signed, "0" * 32, secret, 1 << 40)


@pytest.mark.parametrize(
    "tail, size, match",
    [
        ({**TAIL.as_dict(), "scheme": "sr-nack"}, 256 * MiB, "EC scheme"),
        ({**TAIL.as_dict(), "scheme": "ec-nope"}, 256 * MiB, "EC scheme"),
        ({**TAIL.as_dict(), "bytes": 0}, 256 * MiB, "bytes"),
        ({**TAIL.as_dict(), "bytes": 64 * MiB + 1}, 256 * MiB, "bytes"),
        ({**TAIL.as_dict(), "bytes": 1000}, 1000, "bytes"),
        ({**TAIL.as_dict(), "bytes": 1}, 1, "nothing to cut"),
        ({**TAIL.as_dict(), "k": MAX_CODE + 1}, 256 * MiB, "k"),
        ({**TAIL.as_dict(), "m": 0}, 256 * MiB, "m"),
        ({**TAIL.as_dict(), "k": 4, "m": 8}, 256 * MiB, "m"),
        ({**TAIL.as_dict(), "m": "8"}, 256 * MiB, "m"),
        ({**TAIL.as_dict(), "extra": 1}, 256 * MiB, "unknown"),
        ({"bytes": 1}, 256 * MiB, "lacks"),
        ([1, 2], 256 * MiB, "tail"),
    ],
)
def test_a_bad_tail_is_refused_naming_the_field(tail, size, match) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        parse_tail(tail, size, 64 * MiB)
    with pytest.raises(RemoteProtocolError, match=match):
        parse_hello(_hello(tail, size=size), "0" * 32, None, 1 << 40)


# --- the planned policy ------------------------------------------------------------------
def test_the_planned_policy_follows_its_plan_per_write_and_refuses_strangers() -> None:
    sr, ec = Candidate("sr-nack"), Candidate("ec-mds", 8, 2)
    policy = PlannedPolicy((sr, ec), lambda n: ec if n == 2 else sr)
    assert [policy.before_write(0.0, 100) for _ in range(4)] == [sr, sr, ec, sr]
    assert policy.choices == {sr: 3, ec: 1} and policy.writes == 4
    bad = PlannedPolicy((sr,), lambda n: ec)
    with pytest.raises(ConfigError, match=r"ec-mds\(8,2\)"):
        bad.before_write(0.0, 100)


# --- over a lossy wire -----------------------------------------------------------------------
def test_the_tail_decodes_its_losses_while_the_bulk_resends() -> None:
    sizes = (200_000, 200_000, 64 << 10)  # two bulk messages, then the tail (4 KiB chunks)
    tail = Tail(sizes[-1], Candidate("ec-mds", 8, 2))
    # reliable message n is SDR messages 2n (data) and 2n+1 (parity): lose one chunk of
    # the first bulk message and two of the tail's first submessage, first copies only
    lost = {(0, 8192), (4, 0), (4, 3 * 4096)}
    net = scripted(drop=lambda slot, off, n: n == 0 and (slot, off) in lost)
    a, b = sdr.Context(InprocTransport(net)), sdr.Context(InprocTransport(net))
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    qa.connect(qb.info())
    qb.connect(qa.info())
    config = ReliabilityConfig.from_mapping({"scheme": "sr-nack", "rtt": RTT})
    mine, theirs = policies(config, sum(sizes), 200_000, tail)
    s = ReliableQP(qa, config, adaptive=mine)
    r = ReliableQP(qb, config, adaptive=theirs)
    src = random_bytes(sum(sizes), seed=7)
    dst = np.zeros_like(src)
    smr, rmr = a.register(src), b.register(dst)
    cut = list(pieces(sum(sizes), 200_000, tail.nbytes))
    assert [n for _, n in cut] == list(sizes)
    handles = [r.post_recv(rmr, off, n) for off, n in cut]
    handles += [s.write(smr, off, n) for off, n in cut]
    wait_all(handles, timeout=60)
    assert np.array_equal(src, dst)
    assert net.scripted_drops == 3
    assert s.counters["write_adaptive_sr-nack"] == 2
    assert s.counters["write_adaptive_ec-mds(8,2)"] == 1
    assert r.counters["receive_adaptive_ec-mds(8,2)"] == 1
    assert r.counters["receive_chunks_decoded"] == 2  # the tail's two, without a resend
    assert r.counters["receive_fallbacks"] == 0
    assert s.counters["write_chunks_retransmitted"] == 1  # the bulk's one


# --- the command line --------------------------------------------------------------------
@pytest.mark.parametrize("flag", [None, "--no-tail"])
def test_send_reports_the_tail_it_used_and_no_tail_turns_it_off(tmp_path: Path, flag) -> None:
    source = _payload(tmp_path / "in.bin", 4 * MiB + 12345)
    out = tmp_path / "out.bin"
    receiver, port = _receiver(out, "--timeout", "60")
    args = ["--rate", "100Mbit/s", "--rtt", "50ms", "--loss", "1e-2", "--json"]
    sender = _sender(source, port, *args, *([flag] if flag else []))
    stdout, stderr = sender.communicate(timeout=120)
    assert sender.returncode == 0, stderr
    recv_out, recv_err = receiver.communicate(timeout=60)
    assert receiver.returncode == 0, recv_err
    assert out.read_bytes() == source.read_bytes()
    sent, received = _lines(stdout)[-1]["report"], _lines(recv_out)[-1]["report"]
    assert sent["scheme"] == received["scheme"] == "sr-nack"
    if flag:
        assert sent["tail"] is None and received["tail"] is None
        return
    assert sent["tail"] == received["tail"]
    tail = sent["tail"]
    assert tail["scheme"].startswith("ec-") and 625_000 <= tail["bytes"] < 625_000 + 8192
    key = f"adaptive_{tail['scheme']}({tail['k']},{tail['m']})"
    assert sent["stats"][key] == received["stats"][key] == 1
    assert json.dumps(sent)  # the report stays JSON
