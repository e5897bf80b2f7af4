"""The UDP backend's native loops (backends/udp/_datapath.c) against the Python reference.

- CRC-32: every implementation the CPU has (vpclmul, pclmul, table) equals zlib's.
- Receive: the same datagrams (good, runt, truncated, wrong opcode, unknown QPN, stranger,
  bad length, bad ICRC, bad rkey, duplicate, late, malformed, forged with a valid ICRC)
  through the reference pass and the native one give identical counters, completions,
  memory and key-table state; hypothesis drives the fuzz target's differential as well.
- Send: the native send (with and without GSO) puts the same datagrams on the wire as
  the reference, byte for byte; GRO on the receiving side changes nothing but the reads.
- Bounds: a packet outside its region is refused before anything is sent; malformed
  arguments (positional tables, short or misshapen arrays, missing keywords) raise
  TypeError or ValueError.
- Names: the module exports the names and order of its counters, discards, listed
  columns and table fields; a build whose names differ fails at import.
- What left: a send returns the packets and IP bytes the kernel took; behind a full send
  queue (a tbf qdisc in a private network namespace) it returns after its wait bound with
  the first packets sent, and the QP's sent counters, pacer and PSNs cover exactly the
  datagrams that arrived; a send failing part way (EMSGSIZE) counts what left, then
  raises; GSO refused by the kernel (no UDP checksums: EINVAL) is sent again without.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import time
import types
import zlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sdr
from sdr import placement
from sdr.backends.udp import UdpTransport, native
from sdr.backends.udp.roce import HEADER_SIZE, ICRC_SIZE, decode_packet, encode_packet
from sdr.errors import ProtocolError
from sdr.transport import WriteBatch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "fuzz"))
from targets_wire import _PEER, _STRANGER, _ReceiveRig, fuzz_udp_native_receive  # noqa: E402

needs_native = pytest.mark.skipif(
    native.module is None or placement.place_batch_native is None,
    reason="the native datapath is not built",
)


def test_the_extension_is_built_in_ci() -> None:
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("CI is not set: a build without a compiler may fall back to Python")
    assert native.module is not None, native.NATIVE_ERROR


# --- CRC-32 ---------------------------------------------------------------------------------

_CRC_CHECK = """
import os, sys, zlib
from sdr.backends.udp import _datapath as d
rng = __import__("random").Random(7)
for n in [0, 1, 3, 15, 16, 63, 64, 127, 128, 255, 256, 511, 512, 513, 4096, 8228, 65536, 99991]:
    for v in (0, 1, 0xFFFFFFFF, rng.getrandbits(32)):
        b = os.urandom(n)
        assert d.crc32(b, v) == zlib.crc32(b, v), (d.implementation(), n, v)
print(d.implementation())
"""


@needs_native
@pytest.mark.parametrize("choice", ["", "pclmul", "table"])
def test_every_crc_implementation_equals_zlib(choice: str) -> None:
    env = {**os.environ, "SDR_CRC": choice}
    out = subprocess.run(
        [sys.executable, "-c", _CRC_CHECK], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = out.stdout.strip()
    if choice == "table":
        assert got == "table"
    elif choice == "pclmul":
        assert got in ("pclmul", "table")  # table: the CPU has no PCLMULQDQ
    else:
        assert got in ("vpclmul", "pclmul", "table")


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
def test_crc32_is_zlibs(data: bytes, value: int) -> None:
    assert native.module.crc32(data, value) == zlib.crc32(data, value)  # type: ignore[union-attr]


# --- the receive pass -----------------------------------------------------------------------


def _rigs() -> tuple[_ReceiveRig, _ReceiveRig]:
    """Two identical receivers (same seed: same QPNs, rkeys and bindings)."""
    return _ReceiveRig(), _ReceiveRig()


def _hostile(rig: _ReceiveRig) -> list[tuple[bytes, tuple[str, int]]]:
    """One datagram of every kind the receive pass must tell apart, for ``rig``."""
    qp, local = rig.qp, rig.local
    slot_size = rig.attr.max_message_size
    layout = rig.attr.layout
    gen, slot, msg_id = 0, 0, 0  # binding (0, 0): region offset 256, 1000 bytes
    qpn, rkey = qp.qpns[gen][0], qp.rkeys[gen]

    def packet(
        offset: int,
        length: int,
        *,
        qpn: int = qpn,
        rkey: int = rkey,
        imm: int | None = None,
        src: tuple[str, int] = _PEER,
        byte: int = 1,
    ) -> bytes:
        imm = layout.encode(msg_id, offset // rig.attr.mtu, 0) if imm is None else imm
        va = slot * slot_size + offset
        return encode_packet(src, local, qpn, 0, va, rkey, imm, bytes([byte]) * length)

    good = packet(0, 256)
    corrupt = bytearray(good)
    corrupt[HEADER_SIZE + 5] ^= 1
    bad_length = bytearray(packet(256, 256))
    struct.pack_into("!I", bad_length, 24, 200)
    return [
        (good, _PEER),  # placed
        (good, _PEER),  # duplicate
        (packet(256, 256, byte=2), _STRANGER),  # bad source (ICRC for the stranger)
        (b"\x2b" * 20, _PEER),  # runt
        (b"\x00" + good[1:], _PEER),  # bad opcode
        (packet(256, 256, qpn=(qpn + 7) & 0xFFFFFF), _PEER),  # unknown QPN
        (bytes(bad_length), _PEER),  # bad length
        (bytes(corrupt), _PEER),  # bad ICRC
        (packet(256, 256, rkey=rkey ^ 1), _PEER),  # bad rkey
        (packet(256, 256, imm=layout.encode(msg_id + 1, 1, 0)), _PEER),  # late
        (packet(100, 256), _PEER),  # malformed: not on a packet boundary
        (packet(512, 256, byte=9), _PEER),  # placed: valid ICRC, forged content
        (packet(768, 232, byte=3), _PEER),  # placed: the tail of the bound buffer
    ]


def _run(rig: _ReceiveRig, datagrams: list[tuple[bytes, tuple[str, int]]], impl: str) -> None:
    for i, (data, source) in enumerate(datagrams):
        rig.load(i, data, source)
    previous = placement.use_datapath(impl)
    try:
        if impl == "python":
            rig.receiver._process(len(datagrams))
        else:
            rig.receiver.process_native(len(datagrams))
    finally:
        placement.use_datapath(previous)


def _observed(rig: _ReceiveRig) -> dict[str, object]:
    fields = ("channels", "generations", "imms", "byte_lens", "remote_offsets", "crcs")
    rows = []
    for batch in rig.qp.completions:
        rows += list(zip(*(getattr(batch, f).tolist() for f in fields), strict=True))
    return {
        "counters": rig.qp.counters(),
        "transport": dict(rig.transport.stats),
        "completions": rows,
        "memory": bytes(rig.memory),
    }


@needs_native
def test_every_discard_reason_agrees_with_the_reference() -> None:
    ref, nat = _rigs()
    _run(ref, _hostile(ref), "python")
    _run(nat, _hostile(nat), "native")
    a, b = _observed(ref), _observed(nat)
    assert a == b
    counters = a["counters"]
    for name in ("bad_source", "bad_length", "bad_icrc", "bad_rkey", "late", "malformed"):
        assert counters[name] == 1, (name, counters)  # type: ignore[index]
    assert counters["duplicates"] == 1  # type: ignore[index]
    assert a["transport"] == {**a["transport"], "runt": 1, "bad_opcode": 1, "unknown_qpn": 1}  # type: ignore[dict-item]
    assert len(a["completions"]) == 3  # type: ignore[arg-type]
    ref.check(True)
    nat.check(True)


def _odd_tail_rig(verify: bool) -> tuple[_ReceiveRig, list[bytes], bytes]:
    """A rig with one more receive (generation 0, slot 1, message id 1) of 301 bytes, so
    its last packet carries 45: three bytes of ICRC padding. Returns the rig, the two
    payloads, and their packets as one bytes each (the second corrupted copy last)."""
    from sdr.transport import Bind

    rig = _ReceiveRig()
    rig.receiver.verify_icrc = verify
    rig.qp.bind(Bind(generation=0, slot=1, region=rig.region, offset=3600, length=301, msg_id=1))
    qp, layout, mtu = rig.qp, rig.attr.layout, rig.attr.mtu
    rng = np.random.default_rng(11)
    payloads = [rng.bytes(256), rng.bytes(45)]
    packets = [
        encode_packet(
            _PEER,
            rig.local,
            qp.qpns[0][0],
            0,
            rig.attr.max_message_size + i * mtu,
            qp.rkeys[0],
            layout.encode(1, i, 0),
            payload,
        )  # fmt: skip
        for i, payload in enumerate(payloads)
    ]
    return rig, payloads, packets


@needs_native
@pytest.mark.parametrize("impl", ["python", "native"])
@pytest.mark.parametrize("verify", [True, False])
def test_completions_carry_each_payloads_crc(impl: str, verify: bool) -> None:
    """Each placed packet's completion carries zlib's CRC-32 of its payload (the chunk
    checksums are combined from these). The native pass derives the ICRC from the same
    read of the payload: a packet with ICRC padding still verifies (a wrong derivation
    would count it ``bad_icrc``), and a corrupted one still does not. With the ICRC off
    no payload is read and the checksum is not known (-1)."""
    rig, payloads, packets = _odd_tail_rig(verify)
    corrupt = bytearray(packets[1])
    corrupt[HEADER_SIZE + 40] ^= 0x10
    _run(rig, [(packets[0], _PEER), (packets[1], _PEER)], impl)
    crcs = [c for batch in rig.qp.completions for c in batch.crcs.tolist()]
    assert crcs == ([zlib.crc32(p) for p in payloads] if verify else [-1, -1])
    assert rig.qp.counters()["bad_icrc"] == 0
    rig, _, _ = _odd_tail_rig(verify)
    _run(rig, [(bytes(corrupt), _PEER)], impl)
    placed = [c for batch in rig.qp.completions for c in batch.crcs.tolist()]
    if verify:
        assert rig.qp.counters()["bad_icrc"] == 1 and placed == []
    else:  # nothing reads the payload: placed, its checksum not known (the chunk is read)
        assert placed == [-1]


@needs_native
def test_the_native_pass_splits_gro_datagrams_like_separate_ones() -> None:
    """Three packets of one size back to back in one slot (as UDP_GRO hands them over)
    place exactly as the same packets in three slots."""
    ref, nat = _rigs()
    hostile = _hostile(ref)
    equal = [hostile[0], hostile[11], hostile[12]]  # sizes 292, 292, 268: GRO's rule
    _run(ref, equal, "python")
    joined = b"".join(d for d, _ in _hostile(nat)[:1] + _hostile(nat)[11:13])
    nat.load(0, joined, _PEER)
    previous = placement.use_datapath("native")
    try:
        segments = nat.receiver.process_native(1, np.array([len(equal[0][0])]))
    finally:
        placement.use_datapath(previous)
    assert segments == 3
    assert _observed(ref) == _observed(nat)


@needs_native
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=1500))
def test_native_and_reference_agree_on_fuzz_bytes(raw: bytes) -> None:
    fuzz_udp_native_receive(raw)  # asserts the two agree; crashes on any difference


# --- real sockets: the send pass, GSO and GRO ----------------------------------------------

ATTR = sdr.QPAttr(mtu=1024, chunk_size=4096, max_message_size=1 << 16, max_messages=3)


def _batch(region: object, count: int, length: int = 1024, tail: int = 0) -> WriteBatch:
    lengths = np.full(count, length, np.int64)
    if tail:
        lengths[-1] = tail
    offsets = np.arange(count, dtype=np.int64) * length
    return WriteBatch(
        region=region,  # type: ignore[arg-type]
        generation=0,
        channels=np.zeros(count, np.int64),
        src_offsets=offsets,
        lengths=lengths,
        remote_offsets=offsets + 7,
        imms=np.arange(count, dtype=np.uint32) * 3 + 1,
    )


def _connect_to(qp: object, port: int) -> None:
    """Connect ``qp`` to a fake peer whose data socket is 127.0.0.1:``port``."""
    gens = ATTR.generations
    qp.connect(  # type: ignore[attr-defined]
        {"host": "127.0.0.1", "port": port, "control_port": 1, "control_id": 1,
         "qpns": [[77 + g] for g in range(gens)], "rkeys": [99] * gens}
    )  # fmt: skip


def _captured(impl: str, gso: bool, count: int, tail: int) -> list[bytes]:
    """The datagrams one write batch puts on the wire, read by a plain socket."""
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    t = UdpTransport(port=0, seed=3, gso=gso)
    try:
        qp = t.create_qp(ATTR)
        _connect_to(qp, sink.getsockname()[1])
        data = np.random.default_rng(5).integers(0, 256, 1 << 16, dtype=np.uint8)
        region = t.register(data)
        previous = placement.use_datapath(impl)
        try:
            qp.post_writes(_batch(region, count, tail=tail))
        finally:
            placement.use_datapath(previous)
        out, sink_addr, src = [], sink.getsockname(), (t.host, t.port)
        sink.settimeout(2)
        for _ in range(count):
            got, sender = sink.recvfrom(1 << 16)
            assert sender == src
            fields, payload, good = decode_packet(got, src, sink_addr)
            assert good, "ICRC does not verify"
            out.append(got[:-ICRC_SIZE])  # the ICRC covers the ports, which differ per run
        return out
    finally:
        t.close()
        sink.close()


@needs_native
@pytest.mark.parametrize("gso", [False, True])
@pytest.mark.parametrize("tail", [0, 513])
def test_the_native_send_puts_the_reference_datagrams_on_the_wire(gso: bool, tail: int) -> None:
    count = 40
    assert _captured("native", gso, count, tail) == _captured("python", False, count, tail)


@needs_native
def test_gso_is_not_asked_of_a_socket_without_udp_checksums() -> None:
    """SO_NO_CHECK (the soak turns UDP checksums off) makes the kernel refuse UDP_SEGMENT
    with EINVAL: the send pass sends the group again one datagram per packet, the QP
    counts it once and asks no GSO of the socket after that."""
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.settimeout(2)
    t = UdpTransport(port=0, seed=3, gso=True)
    try:
        t.data_socket.setsockopt(socket.SOL_SOCKET, native.SO_NO_CHECK, 1)
        qp = t.create_qp(ATTR)
        _connect_to(qp, sink.getsockname()[1])
        region = t.register(np.ones(1 << 16, np.uint8))
        previous = placement.use_datapath("native")
        try:
            qp.post_writes(_batch(region, 20))
            assert not t.gso and qp.stats["gso_refused"] == 1
            qp.post_writes(_batch(region, 20))
        finally:
            placement.use_datapath(previous)
        assert all(len(sink.recv(1 << 16)) == HEADER_SIZE + 1024 + ICRC_SIZE for _ in range(40))
        assert qp.stats["gso_refused"] == 1 and qp.stats["wire_packets_sent"] == 40
        assert qp.stats["wire_packets_unsent"] == 0
    finally:
        t.close()
        sink.close()


@needs_native
def test_a_packet_outside_its_region_is_refused_before_anything_is_sent() -> None:
    t = UdpTransport(port=0, seed=3)
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.setblocking(False)
    try:
        qp = t.create_qp(ATTR)
        _connect_to(qp, sink.getsockname()[1])
        region = t.register(np.zeros(4096, np.uint8))
        previous = placement.use_datapath("native")
        try:
            with pytest.raises(ProtocolError, match="outside the region"):
                qp.post_writes(_batch(region, 5))  # 5 KiB from a 4 KiB region
        finally:
            placement.use_datapath(previous)
        with pytest.raises(BlockingIOError):
            sink.recv(1 << 16)  # not even the first four packets left
    finally:
        t.close()
        sink.close()


def _transfer(impl: str, gso: bool, gro: bool) -> tuple[bytes, dict[str, int]]:
    """One 60 KiB write between two transports; the bytes received and the counters."""
    previous = placement.use_datapath(impl)
    ta = UdpTransport(port=0, seed=1, gso=gso)
    tb = UdpTransport(port=0, seed=2, gro=gro)
    try:
        with sdr.Context(backend=ta) as a, sdr.Context(backend=tb) as b:
            qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
            qa.connect(qb.info())
            qb.connect(qa.info())
            src = np.random.default_rng(9).integers(0, 256, 60_000, dtype=np.uint8)
            dst = np.zeros(60_000, np.uint8)
            recv = qb.post_recv(b.register(dst))
            send = qa.post_send(a.register(src))
            deadline = time.monotonic() + 10
            while not (recv.arrived and send.sent) and time.monotonic() < deadline:
                a.progress()
                b.progress()
            assert recv.arrived and send.sent
            assert np.array_equal(src, dst)
            return dst.tobytes(), qb.transport_qp.counters()
    finally:
        placement.use_datapath(previous)


@needs_native
@pytest.mark.parametrize(("gso", "gro"), [(False, False), (True, False), (True, True)])
def test_a_write_lands_the_same_through_every_path(gso: bool, gro: bool) -> None:
    want, want_counters = _transfer("python", False, False)
    got, counters = _transfer("native", gso, gro)
    assert got == want and counters == want_counters


# --- argument checks ------------------------------------------------------------------------


def _module() -> ModuleType:
    """The native module (the tests that call this are skipped where it is not built)."""
    assert native.module is not None, native.NATIVE_ERROR
    return native.module


def _tables(**change: Any) -> native.ReceiveTables:
    """Tables for four 64 KiB slots, room to list every segment GRO could make of them."""
    fields: dict[str, Any] = dict(
        staging=np.zeros(4 * 65536, np.uint8), slot_size=65536, local_ip=1, local_port=1,
        verify=True, qpns=np.zeros(4, np.int64), order=np.zeros(4, np.int64),
        rkeys=np.zeros(4, np.int64), owner=np.zeros(4, np.int64),
        peer_sources=np.zeros(4, np.int64),
        listed=np.zeros((len(native.LISTED), 4 * 1821), np.int64),
        counters=np.zeros(len(native.COUNTERS), np.int64),
        discards=np.zeros((4, len(native.DISCARDS)), np.int64),
    )  # fmt: skip
    fields.update(change)
    return native.ReceiveTables(**fields)


@needs_native
def test_check_refuses_bad_arguments() -> None:
    check = _module().check
    one = np.zeros(1, np.int64)
    assert check(_tables(), lengths=one, sources=one, gso_sizes=one) == (1, 0)  # a runt
    with pytest.raises(TypeError, match="at most"):  # the tables are not positional columns
        check(_tables(), one, one, one)
    with pytest.raises(TypeError, match="'sources'"):
        check(_tables(), lengths=one)
    with pytest.raises(TypeError, match="int64"):
        check(_tables(), lengths=one.astype(np.int32), sources=one)
    five = np.zeros(5, np.int64)
    with pytest.raises(ValueError, match="slots"):
        check(_tables(), lengths=five, sources=five, gso_sizes=five)
    with pytest.raises(ValueError, match="listed"):  # too short for GRO's minimal segments
        check(_tables(listed=np.zeros((5, 4), np.int64)), lengths=one, sources=one, gso_sizes=one)
    with pytest.raises(ValueError, match="listed"):
        check(_tables(listed=np.zeros((4, 8000), np.int64)), lengths=one, sources=one)
    with pytest.raises(ValueError, match="discards"):  # a row per QP, a column per reason
        check(_tables(discards=np.zeros((4, 3), np.int64)), lengths=one, sources=one)
    with pytest.raises(ValueError, match="discards"):
        check(_tables(discards=np.zeros((3, 4), np.int64)), lengths=one, sources=one)
    with pytest.raises(TypeError, match="2-D"):
        check(_tables(discards=np.zeros(16, np.int64)), lengths=one, sources=one)
    with pytest.raises(ValueError, match="counters"):
        check(_tables(counters=np.zeros(2, np.int64)), lengths=one, sources=one)
    with pytest.raises(TypeError, match="writable"):
        check(_tables(staging=bytes(65536)), lengths=one, sources=one)
    with pytest.raises(ValueError, match="local_port"):
        check(_tables(local_port=1 << 16), lengths=one, sources=one)
    full = _tables()
    names = [f.name for f in dataclasses.fields(full) if f.name != "verify"]
    partial = types.SimpleNamespace(**{name: getattr(full, name) for name in names})
    with pytest.raises(TypeError, match="'verify'"):
        check(partial, lengths=one, sources=one)
    partial.verify = False  # any object with the fields will do
    assert check(partial, lengths=one, sources=one) == (1, 0)


@needs_native
def test_receive_refuses_bad_arguments() -> None:
    receive = _module().receive
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    try:
        assert receive(sock.fileno(), _tables(), max_datagrams=4, gro=True) == (0, 0, 0)
        assert receive(sock.fileno(), _tables()) == (0, 0, 0)  # as many as the staging holds
        with pytest.raises(ValueError, match="max_datagrams"):
            receive(sock.fileno(), _tables(), max_datagrams=0)
        with pytest.raises(ValueError, match="slots"):
            receive(sock.fileno(), _tables(), max_datagrams=5)
        with pytest.raises(TypeError, match="positional"):
            receive(sock.fileno(), _tables(), 4)
    finally:
        sock.close()


# --- the names the module counts under --------------------------------------------------------


@needs_native
def test_the_module_names_its_counters_and_tables() -> None:
    """The order of the counter arrays is the C module's: it exports the names, and the
    Python side holds them to its own at import."""
    m = _module()
    assert m.COUNTERS == native.COUNTERS and m.DISCARDS == native.DISCARDS
    assert m.LISTED == native.LISTED
    assert tuple(f.name for f in dataclasses.fields(native.ReceiveTables)) == m.TABLES
    native.check_names(m)
    for name, value in [
        ("COUNTERS", ("bad_opcode", "runt", "unknown_qpn")),  # two swapped
        ("DISCARDS", (*native.DISCARDS, "bad_pkey")),  # one added
        ("LISTED", native.LISTED[:-1]),
        ("TABLES", None),  # missing
    ]:
        fake = types.SimpleNamespace(
            COUNTERS=native.COUNTERS, DISCARDS=native.DISCARDS, LISTED=native.LISTED,
            TABLES=m.TABLES,
        )  # fmt: skip
        setattr(fake, name, value)
        with pytest.raises(ImportError, match=name):
            native.check_names(fake)


_MISMATCH = """
import types
import sdr.native
real = sdr.native.load_extension
def load(name, env):
    module, why = real(name, env)
    if name.endswith("_datapath"):
        names = ("bad_source", "bad_icrc", "bad_length", "bad_rkey")  # two swapped
        module = types.SimpleNamespace(**{**vars(module), "DISCARDS": names})
    return module, why
sdr.native.load_extension = load
try:
    import sdr.backends.udp.native
except ImportError as exc:
    print("ImportError:", exc)
else:
    print("imported")
"""


@needs_native
def test_a_build_counting_in_another_order_fails_at_import() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _MISMATCH], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError:") and "DISCARDS" in out.stdout, out.stdout


# --- the send pass: what left is what is counted ---------------------------------------------

_LOOPBACK = 0x7F000001


def _send_columns(lengths: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A region and the columns of packets of these payload lengths, back to back."""
    n, size = len(lengths), sum(lengths)
    region = (np.arange(size) % 251).astype(np.uint8)
    length = np.asarray(lengths, np.int64)
    offsets = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
    return region, dict(
        src_offsets=offsets, lengths=length, remote_offsets=offsets,
        imms=np.arange(n, dtype=np.int64), qpns=np.full(n, 77, np.int64),
        psns=np.arange(n, dtype=np.int64),
    )  # fmt: skip


def _wire(lengths: list[int]) -> int:
    return sum(HEADER_SIZE + n + (-n & 3) + ICRC_SIZE + 28 for n in lengths)


@contextlib.contextmanager
def _sink_and_source(rcvbuf: int = 4 << 20) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A loopback socket that receives (with ``rcvbuf`` of buffer) and one to send from."""
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sink.bind(("127.0.0.1", 0))
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        src.bind(("127.0.0.1", 0))
        yield sink, src
    finally:
        sink.close()
        src.close()


@needs_native
@pytest.mark.parametrize("gso", [1, 8])
def test_a_send_reports_what_left(gso: int) -> None:
    with _sink_and_source() as (sink, src):
        lengths = [1000] * 19 + [333]
        region, cols = _send_columns(lengths)
        result = _module().send(
            src.fileno(), region, peer=(_LOOPBACK, sink.getsockname()[1]),
            local=(_LOOPBACK, src.getsockname()[1]), rkey=5, gso_segments=gso, **cols,
        )  # fmt: skip
        assert tuple(result) == (20, _wire(lengths), 0, 0)
        assert (result.packets, result.wire_bytes, result.error, result.gso_refused) == (
            20, _wire(lengths), 0, 0,
        )  # fmt: skip
        sink.settimeout(2)
        assert [len(sink.recv(1 << 16)) + 28 for _ in range(20)] == [_wire([n]) for n in lengths]
        send = _module().send
        with pytest.raises(TypeError, match="'peer'"):
            send(src.fileno(), region, local=(1, 1), rkey=5, **cols)
        with pytest.raises(ValueError, match="peer"):
            send(src.fileno(), region, peer=(1, 1 << 16), local=(1, 1), rkey=5, **cols)
        with pytest.raises(ValueError, match="max_wait_ms"):
            send(src.fileno(), region, peer=(1, 1), local=(1, 1), rkey=5, max_wait_ms=-1, **cols)
        with pytest.raises(TypeError, match="positional"):
            send(src.fileno(), region, (1, 1), (1, 1), 5, *cols.values())


@needs_native
@pytest.mark.parametrize("count, length", [(20, 1000), (100, 8000)])
def test_gso_refused_by_the_kernel_is_turned_off_and_the_group_sent_again(
    count: int, length: int
) -> None:
    """Without UDP checksums (SO_NO_CHECK) the kernel answers EINVAL to UDP_SEGMENT (a
    device without checksum offload answers EIO): the send pass sends the same packets
    one datagram per message and says so, as quinn-udp does. 800 KB spans several of the
    send's build windows: the refusal in the first holds for the rest, and only built
    packets are sent again."""
    with _sink_and_source() as (sink, src):
        src.setsockopt(socket.SOL_SOCKET, native.SO_NO_CHECK, 1)
        lengths = [length] * count
        region, cols = _send_columns(lengths)
        result = _module().send(
            src.fileno(), region, peer=(_LOOPBACK, sink.getsockname()[1]),
            local=(_LOOPBACK, src.getsockname()[1]), rkey=5, gso_segments=8, **cols,
        )  # fmt: skip
        assert tuple(result) == (count, _wire(lengths), 0, 1)
        sink.settimeout(2)
        got = [sink.recv(1 << 16) for _ in range(count)]
        assert all(len(d) == HEADER_SIZE + length + ICRC_SIZE for d in got)
        assert [int.from_bytes(d[9:12], "big") for d in got] == list(range(count))


@needs_native
@pytest.mark.parametrize("gso", [1, 8])
def test_a_batch_over_several_build_windows_leaves_whole_and_in_order(gso: int) -> None:
    """The send builds headers and ICRCs a window (256 KiB of payload) at a time and
    sends each window before building the next; 1.2 MB of mixed sizes crosses five of
    them: every packet leaves once, in order, with its bytes and a verifying ICRC."""
    with _sink_and_source(8 << 20) as (sink, src):
        lengths = [8000] * 70 + [30000] * 20 + [123] + [8000] * 5
        region, cols = _send_columns(lengths)
        result = _module().send(
            src.fileno(), region, peer=(_LOOPBACK, sink.getsockname()[1]),
            local=(_LOOPBACK, src.getsockname()[1]), rkey=5, gso_segments=gso, **cols,
        )  # fmt: skip
        assert tuple(result) == (len(lengths), _wire(lengths), 0, 0)
        sink.settimeout(2)
        here, there = src.getsockname(), sink.getsockname()
        offsets = cols["src_offsets"]
        for psn, n in enumerate(lengths):
            fields, payload, good = decode_packet(sink.recv(1 << 16), here, there)
            assert good, f"packet {psn}: ICRC does not verify"
            assert fields.psn == psn
            assert bytes(payload) == region[offsets[psn] : offsets[psn] + n].tobytes()


def _in_private_netns(tmp_path: pathlib.Path, setup: str, script: str) -> Any:
    """Run ``script`` (Python printing one JSON line) in a network namespace of its own,
    after the shell commands ``setup`` there (root, or a user namespace: no privilege)."""
    if sys.platform != "linux" or not all(shutil.which(t) for t in ("unshare", "ip", "tc")):
        pytest.skip("needs Linux with unshare, ip and tc")
    unshare = ["unshare", "--net"]
    if os.geteuid() != 0:
        unshare += ["--user", "--map-root-user"]
    env = dict(os.environ)
    preload = env.pop("LD_PRELOAD", "")  # an ASan runtime for Python only, not for ip or tc
    path = tmp_path / "script.py"
    path.write_text(script)
    shell = f'ip link set lo up && {setup} || exit 77; exec env LD_PRELOAD="$1" "$2" "$3"'
    out = subprocess.run(
        [*unshare, "sh", "-c", shell, "sh", preload, sys.executable, str(path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if out.returncode == 77 or (out.returncode and "unshare" in out.stderr):
        pytest.skip(f"no private network namespace with {setup!r}: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


# A socket with the smallest send buffer behind a queue that holds what it takes (a tbf
# qdisc at 1 Mbit/s on loopback; without one, loopback frees a datagram's buffer space as
# it is sent and a UDP send never waits), and a peer that does not read until the send is
# over: the kernel takes a few packets, then refuses (EAGAIN) until the queue drains.
_FULL_QUEUE = "tc qdisc add dev lo root tbf rate 1mbit burst 1600 limit 1000000"

_BOUNDED = """
import json, socket, sys, time
import numpy as np
sys.path.insert(0, {tests!r})
from test_udp_native import _LOOPBACK, _module, _send_columns
sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sink.bind(("127.0.0.1", 0))
sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
src.bind(("127.0.0.1", 0))
src.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
src.setblocking(False)
region, cols = _send_columns([1000] * 400)
start = time.monotonic()
result = _module().send(
    src.fileno(), region, peer=(_LOOPBACK, sink.getsockname()[1]),
    local=(_LOOPBACK, src.getsockname()[1]), rkey=5, gso_segments={gso}, max_wait_ms=50,
    **cols)
took = time.monotonic() - start
sink.settimeout(1.0)
sizes, psns = [], []
try:
    while True:
        got = sink.recv(1 << 16)
        sizes.append(len(got) + 28)
        psns.append(int.from_bytes(got[9:12], "big"))
except TimeoutError:
    pass
print(json.dumps(dict(result=list(result), took=took, sizes=sizes, psns=psns)))
"""


@needs_native
@pytest.mark.parametrize("gso", [1, 8])
def test_a_full_send_queue_returns_in_bounded_time_with_what_left(
    tmp_path: pathlib.Path, gso: int
) -> None:
    """The send used to wait in poll until the kernel took every packet (forever if the
    queue never drained); now it waits at most max_wait_ms in all and says what left."""
    got = _in_private_netns(
        tmp_path, _FULL_QUEUE, _BOUNDED.format(tests=str(ROOT / "tests"), gso=gso)
    )
    packets, wire, error, refused = got["result"]
    assert 0 < packets < 400 and error == errno.EAGAIN and not refused
    assert got["took"] < 1.0  # 50 ms of waits, and the packets' headers and ICRCs
    # the kernel took exactly the packets counted, the first ones, and their bytes
    assert got["psns"] == list(range(packets))
    assert sum(got["sizes"]) == wire == _wire([1000] * packets)


_THROUGH_QP = """
import json, socket, sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_udp_native import ATTR, _batch, _connect_to
import sdr
from sdr import placement
from sdr.backends.udp import UdpTransport
placement.use_datapath("native")
sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sink.bind(("127.0.0.1", 0))
sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
t = UdpTransport(port=0, seed=3, gso={gso}, socket_buffer=1)
qp = t.create_qp(ATTR)
_connect_to(qp, sink.getsockname()[1])
paced = []
qp.pacer.consume = lambda now, bits: paced.append(bits)
region = t.register(np.ones(1 << 16, np.uint8))
error = None
try:
    qp.post_writes(_batch(region, {count}, length={length}, tail={tail}))
except sdr.TransportError as exc:
    error = str(exc)
sink.settimeout(1.0)
sizes, psns = [], []
try:
    while True:
        got = sink.recv(1 << 16)
        sizes.append(len(got) + 28)
        psns.append(int.from_bytes(got[9:12], "big"))
except TimeoutError:
    pass
print(json.dumps(dict(stats=qp.stats, paced=paced, next_psn=qp.psns.next[0][0], sizes=sizes,
                      psns=psns, error=error)))
"""


@needs_native
@pytest.mark.parametrize("gso", [False, True])
def test_a_partial_send_counts_exactly_what_the_kernel_took(
    tmp_path: pathlib.Path, gso: bool
) -> None:
    """Through the QP: the send queue stays full part way through a batch. The sent
    counters, the pacer's tokens and the PSNs cover exactly the datagrams that arrived;
    the rest is counted unsent (the core counts it departed: to it, a loss)."""
    script = _THROUGH_QP.format(tests=str(ROOT / "tests"), gso=gso, count=250, length=256, tail=0)
    got = _in_private_netns(tmp_path, _FULL_QUEUE, script)
    stats, sizes = got["stats"], got["sizes"]
    arrived = len(sizes)
    assert got["error"] is None and 0 < arrived < 250
    assert stats["wire_packets_sent"] == arrived
    assert stats["wire_bytes_sent"] == sum(sizes) == _wire([256] * arrived)
    assert stats["wire_packets_unsent"] == 250 - arrived
    assert got["paced"] == [8 * sum(sizes)]
    assert got["psns"] == list(range(arrived)) and got["next_psn"] == arrived


@needs_native
@pytest.mark.parametrize("gso", [False, True])
def test_a_send_that_fails_part_way_counts_what_left_then_raises(
    tmp_path: pathlib.Path, gso: bool
) -> None:
    """A link MTU of 1500 with DF: the batch's 19 1 KiB packets leave (with GSO in one
    message), then its last, 2 KiB, fails alone (EMSGSIZE). Before, nothing was counted
    at all (the error was raised first) while 19 datagrams had left, and the PSNs of all
    20 were spent."""
    script = _THROUGH_QP.format(
        tests=str(ROOT / "tests"), gso=gso, count=20, length=1000, tail=2000
    )
    setup = "ip link set lo mtu 1500"
    script = script.replace("socket_buffer=1", "socket_buffer=1 << 20")
    got = _in_private_netns(tmp_path, setup, script)
    stats, sizes = got["stats"], got["sizes"]
    assert "Message too long" in str(got["error"]), got["error"]
    assert len(sizes) == 19
    assert stats["wire_packets_sent"] == 19 and stats["wire_packets_unsent"] == 1
    assert stats["wire_bytes_sent"] == sum(sizes) == _wire([1000] * 19)
    assert stats["gso_refused"] == 0
    assert got["paced"] == [8 * sum(sizes)]
    assert got["psns"] == list(range(19)) and got["next_psn"] == 19


@needs_native
def test_a_batch_queued_for_polling_outlives_the_next_pass() -> None:
    """Two passes before the QP polls: the first pass's completions keep their own
    lengths and addresses (the pass's table they were read from is reused by the next)."""
    ref, nat = _rigs()
    for rig, impl in ((ref, "python"), (nat, "native")):
        hostile = _hostile(rig)
        _run(rig, [hostile[0]], impl)  # 256 bytes at the buffer's start
        _run(rig, [hostile[12]], impl)  # 232 bytes at 768
    a, b = _observed(ref), _observed(nat)
    assert a == b
    assert [(row[3], row[4] % 1024) for row in b["completions"]] == [(256, 0), (232, 768)]  # type: ignore[attr-defined]
