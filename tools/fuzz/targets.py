"""Fuzz targets: every parser and decoder that takes bytes from the network or a file.

Each target takes raw bytes and must either accept them or raise an ``sdr.SDRError``
(or ``ValueError`` where the API documents it); anything else is a crash. Targets that
touch memory also assert that nothing is written outside a posted buffer. The same
targets run under atheris (``tools/fuzz/run.py``, millions of inputs) and, briefly, in
the test suite (tests/test_fuzz_targets.py). This module holds the core's targets and
imports the others (targets_wire: RoCEv2 and the UDP receive path; targets_text:
control messages, configs, plans, units, out-of-band frames; targets_setup: the set-up
exchange of ``sdr send/recv``) so one import registers all.
"""

from __future__ import annotations

import json
import struct

from registry import TARGETS, target

import sdr
from sdr.control import decode_cts, decode_cts_request, encode_cts_request
from sdr.key_table import KeyTable, Placement
from sdr.transport import Bind, CompletionBatch, MemoryRegion

__all__ = ["TARGETS", "target"]

_ATTR = sdr.QPAttr(
    mtu=256, chunk_size=512, max_message_size=4096, max_messages=8, generations=2, channels=2
)
_ROW = struct.Struct("<BBIHq")  # channel, generation, imm, byte_len, remote offset


@target("cts")
def fuzz_cts(data: bytes) -> None:
    try:
        cts = decode_cts(data)
    except sdr.ProtocolError:
        return
    assert decode_cts(cts.encode()) == cts
    if data[3] == 0:  # the pad byte is ignored on decode and zero on encode
        assert cts.encode() == data


@target("cts_request")
def fuzz_cts_request(data: bytes) -> None:
    """The core's CTS request (SDR type 2): decode, re-encode, and feed it to a core."""
    try:
        seq = decode_cts_request(data)
    except sdr.ProtocolError:
        seq = None
    if seq is not None:
        assert decode_cts_request(encode_cts_request(seq)) == seq
    core = sdr.QueuePairCore(_ATTR)
    core.post_recv(0.0, MemoryRegion(key=1, view=memoryview(bytearray(4096))))
    core.actions_to_do()
    core.receive_control(0.0, data)  # never raises: counted as malformed, or answered
    answers = core.actions_to_do()
    assert len(answers) <= 1 and (not answers or seq == 0)


_CTX: sdr.Context | None = None


@target("qp_info")
def fuzz_qp_info(data: bytes) -> None:
    """Peer info bytes into connect(): a QP connects or refuses with an SDRError."""
    global _CTX
    if _CTX is None:
        _CTX = sdr.Context("inproc")  # one context: loading a backend costs ~10 ms
    qp = _CTX.create_qp(_ATTR)
    try:
        qp.connect(data)
    except (sdr.ProtocolError, sdr.ConfigError):
        assert not qp.connected
    finally:
        qp.close()
        _CTX._qps.remove(qp)


@target("qp_attr")
def fuzz_qp_attr(data: bytes) -> None:
    try:
        values = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return
    if not isinstance(values, dict):
        return
    try:
        sdr.QPAttr(**{str(k): v for k, v in values.items()})
    except (sdr.ConfigError, TypeError):
        return


@target("completions")
def fuzz_completions(data: bytes) -> None:
    """Forged completion rows against two posted receives: only valid rows mark bits."""
    core = sdr.QueuePairCore(_ATTR)
    memory = bytearray(3 * 4096)
    mr = MemoryRegion(key=1, view=memoryview(memory))
    recs = [core.post_recv(0.0, mr, 0, 1000), core.post_recv(0.0, mr, 4096, 4096)]
    n = len(data) // _ROW.size
    rows = [_ROW.unpack_from(data, i * _ROW.size) for i in range(n)]
    core.receive_completions(0.0, CompletionBatch.from_rows(rows))
    c = core.counters
    handled = (
        c.packets_accepted
        + c.duplicates
        + c.late
        + c.stale_generation
        + c.malformed
        + c.out_of_range
        + c.imm_only_packets
    )
    assert handled == n
    for rec in recs:
        assert rec.bitmap.packets.sum() <= rec.bitmap.n_packets


@target("key_table")
def fuzz_key_table(data: bytes) -> None:
    """Forged packet headers: a placement never leaves its binding."""
    table = KeyTable(_ATTR)
    mr = MemoryRegion(key=1, view=memoryview(bytearray(8192)))
    table.bind(Bind(generation=1, slot=3, region=mr, offset=1000, length=1500, msg_id=5))
    table.bind(Bind(generation=0, slot=0, region=mr, offset=5000, length=256, msg_id=0))
    bounds = {1000: 2500, 5000: 5256}
    for i in range(len(data) // 16):
        gen, roff, length, imm = struct.unpack_from("<BqHI", data, i * 16)
        where = table.resolve(gen, roff, length, imm)
        if isinstance(where, Placement):
            start = max(s for s in bounds if s <= where.offset)
            assert where.offset + length <= bounds[start]


import targets_arrivals  # noqa: E402,F401
import targets_connect  # noqa: E402,F401
import targets_control  # noqa: E402,F401
import targets_forward  # noqa: E402,F401
import targets_placement  # noqa: E402,F401
import targets_setup  # noqa: E402,F401
import targets_text  # noqa: E402,F401  (registers its targets)
import targets_wire  # noqa: E402,F401
