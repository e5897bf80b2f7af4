"""Seed inputs per fuzz target: valid messages the fuzzer mutates from the first run.

Coverage-guided fuzzing finds the deep branches of a parser much sooner when it starts
from inputs that already pass the outer checks (lengths, checksums, magic numbers).
"""

from __future__ import annotations

import json
import pathlib
import struct
import zlib

import numpy as np

__all__ = ["seeds", "write_seeds"]


def _messages() -> list[bytes]:
    from sdr.reliability.messages import Abort, Ack, Digest, EcNack, Nack, Probe, Sack

    msgs = [
        Digest(3, 100_000, 0xDEADBEEF, 4096, 0, np.arange(25, dtype=np.uint32)),
        Ack(1),
        Ack(2, failed=True),
        Sack(4, 3, np.array([True, False, True]), True),
        Nack(5, ((0, 2), (7, 1))),
        EcNack(6, 4, {0: np.array([True, False, False, True]), 3: np.ones(4, bool)}),
        Probe(7),
        Abort(8, mismatch=True),
    ]
    # odd first byte: the target seals the rest with a CRC, so strip the real trailer
    return [m.encode() for m in msgs] + [b"\x01" + m.encode()[:-4] for m in msgs]


def _control_large() -> dict[str, list[bytes]]:
    """``flags | when | message`` inputs of nack_large and sack_large (targets_control):
    valid messages, oversized ones (the forged NACK of 509 copies of [0, 2^32), an
    EC_NACK of another k, a SACK past the message) and sealed forms (flags bit 0)."""
    from sdr.reliability.messages import Ack, EcNack, Nack, Sack

    nacks = [
        Nack(1, ((5, 3), (100, 50), (65_530, 100))),
        EcNack(3, 32, {0: np.ones(32, bool), 2047: np.arange(32) % 3 == 0, 9: np.ones(32, bool)}),
        EcNack(4, 8, {s: np.ones(8, bool) for s in range(0, 4000, 7)}),
        EcNack(5, 32_576, {0: np.ones(32_576, bool)}),
    ]
    sacks = [
        Sack.build(1, np.arange(70_000) % 5 != 0, True),
        Sack(2, 2**32 - 2, np.ones(32_000, bool), False),
        Sack(3, 60_000, np.ones(30_000, bool), True),
        Ack(4),
        Ack(5, failed=True),
    ]

    # the 4,090-byte NACK repeating [0, 2^32) 509 times (the encoder would merge them)
    head = struct.pack("!BBHQH", Nack.TYPE, 1, 0, 2, 509) + struct.pack("!II", 0, 2**32 - 1) * 509
    forged = head + struct.pack("!I", zlib.crc32(head))

    def inputs(wires: list[bytes]) -> list[bytes]:
        return [b"\x00\x20" + w for w in wires] + [b"\x11\x08" + w[:-4] for w in wires]

    return {
        "nack_large": inputs([forged, *(m.encode() for m in nacks)]),
        "sack_large": inputs([m.encode() for m in sacks]),
    }


def _plan() -> bytes:
    from sdr.collectives.plan import ChunkRef, Op, Plan

    ops = [
        [Op("put", ChunkRef("scratch", 0), (ChunkRef("input", 0),), peer=1), Op("signal", peer=1)],
        [Op("wait", peer=0), Op("reduce", ChunkRef("output", 0), (ChunkRef("input", 0),))],
    ]
    plan = Plan("seed", "allreduce", 2, {"input": 2, "output": 2, "scratch": 2}, ops)
    return plan.dumps().encode()


def _roce() -> list[bytes]:
    from sdr.backends.udp.roce import encode_packet

    src, dst = ("127.0.0.1", 40000), ("127.0.0.1", 4791)
    return [
        encode_packet(src, dst, 0x1234, 7, 1024, 0xABCDEF01, 0x00400001, bytes(range(256))),
        encode_packet(src, dst, 0x42, 0, 0, 1, 5, b"abc"),
        encode_packet(src, dst, 0x42, 0, 0, 1, 5, b""),
    ]


def _udp_receive() -> list[bytes]:
    out = []
    for flags in (0x0F, 0x0E, 0x0D, 0x0B, 0x07, 0x1F, 0x2F, 0x4F, 0x81):
        head = struct.pack("<BB", 1, flags)
        # endpoint 0 (generation 0), slot 0, offset 0, imm: message 0 packet 0, 256 bytes
        body = struct.pack("<BBHIH", 0, 0, 0, 0, 256) + bytes(range(256)) + bytes(4)
        out.append(head + body)
    return out


def _offload() -> bytes:
    from sdr.backends.offload.wire import encode_header

    return encode_header(1, 0, 0x00400001, 8192) + bytes(64)


def _forward_vnet() -> list[bytes]:
    """forward_vnet: limit, mode (bit 0: vnet out, bit 1: merge), shape (bit 0: IPv6, bit 1:
    TCP), payload, segment size, options, flags, frames, edits, cut, then loss bytes."""
    out = []
    for mode, shape, payload, gso in ((3, 2, 5000, 1400), (1, 0, 9000, 1000), (0, 3, 2000, 700)):
        head = struct.pack(
            "<HBBHHBBBBB", 1500 - 68, mode, shape, payload, gso - 1, 3, 0x18, 2, 0, 0
        )
        out.append(head + bytes([255] * 200 + [0] + [255] * 55))
    return out


def _transfer_setup() -> list[bytes]:
    """transfer_setup: mode (bit 0 secret, 1 sender's side, 2 replay, 3 close, 7 raw),
    edits, cut, size and limit picks, then edit bytes (or, raw, the wire)."""
    heads = [
        (0, 0, 0, 3, 4),  # receiver, no secret, 1 MiB + 1 within 1 TiB: accepted
        (1, 0, 0, 2, 3),  # signed: accepted
        (5, 0, 0, 2, 3),  # signed, replayed: refused
        (1, 0, 128, 2, 3),  # half a frame: refused
        (9, 0, 200, 2, 3),  # most of a frame, then the writer closes
        (0, 0, 0, 4, 3),  # 1 TiB announced, 1 MiB + 1 allowed: refused
        (1, 0, 0, 6, 5),  # 2^63 announced
        (2, 0, 0, 0, 0),  # the sender's side: a reply
        (3, 0, 0, 0, 0),
        (7, 0, 0, 0, 0),  # a replayed reply
    ]
    out = [bytes(h) for h in heads]
    out.append(bytes((1, 1, 0, 2, 3)) + b"\x02\x00\x00\x00\x04")  # signed, one field edited
    challenge = json.dumps({"challenge": "0123456789abcdef" * 2}).encode()
    out.append(b"\x82\x00\x00\x00\x00" + len(challenge).to_bytes(4, "big") + challenge)
    return out


def seeds() -> dict[str, list[bytes]]:
    """Valid and near-valid inputs for every target that has a structured format."""
    from sdr.control import CTS, encode_cts_request

    toml = (
        b'[reliability]\nscheme = "ec-mds"\nrtt = "25ms"\nalpha = 2.0\nk = 32\nm = 8\n'
        b'link_rate = "400Gbit/s"\nglobal_timeout = "2s"\n[reliability.params]\nx = 1\n'
    )
    info = {
        "version": 1,
        "backend": "inproc",
        "attr": {
            "mtu": 256,
            "max_message_size": 4096,
            "max_messages": 8,
            "channels": 2,
            "generations": 2,
            "id_bits": 10,
            "offset_bits": 18,
            "user_imm_bits": 4,
        },
        "transport": {"endpoint": 1},
    }
    return {
        "cts": [CTS(5, 5, 3, 1, 4096).encode()],
        "cts_request": [encode_cts_request(0), encode_cts_request(7)],
        "reliability_message": _messages(),
        "reliability_config": [toml, b'scheme = "sr-nack"\nrtt = 0.01\n'],
        "plan": [_plan()],
        "roce_decode": _roce(),
        "udp_receive": _udp_receive(),
        "units": [b"\x0064KiB", b"\x01400Gbit/s", b"\x0225ms", b"\x033750km"],
        "qp_info": [json.dumps(info).encode()],
        "qp_attr": [json.dumps({"mtu": 1024, "chunk_size": "4KiB", "channels": 2}).encode()],
        "oob_frame": [json.dumps({"info": "x", "n": [1, 2.5, None]}).encode()],
        "offload_header": [_offload()],
        "forward_vnet": _forward_vnet(),
        "loss_trace": [b"0 0 1  # a loss\n0 1\n", b"# header\n" + b"0 " * 40 + b"1\n"],
        "transfer_setup": _transfer_setup(),
        # targets_connect: byte 0 mode (bit 7: raw JSON), byte 1 edits to the real info
        **{
            name: [b"\x00\x00", b"\x01\x00", b"\x00\x01\x05\x00\x00\x00\x03", b"\x80{}"]
            for name in ("udp_connect", "offload_connect", "inproc_connect")
        },
        **_control_large(),
    }


def write_seeds(name: str, corpus: pathlib.Path) -> int:
    """Write the seeds of target ``name`` into ``corpus`` (kept if present); returns how many."""
    corpus.mkdir(parents=True, exist_ok=True)
    items = seeds().get(name, [])
    for i, data in enumerate(items):
        path = corpus / f"seed-{i:03d}"
        if not path.exists():
            path.write_bytes(data)
    return len(items)
