"""Fuzz targets for ``qp.connect(peer_info)`` on real transports: peer info is network input.

- ``udp_connect``: a UDP QP (loopback) connects to altered info of a real peer QP;
- ``offload_connect``: the same on the offload backend (inline engine; simple and RoCE
  wires);
- ``inproc_connect``: the same on the in-process wire.

Input: byte 0 picks the mode. With bit 7 set the rest is the peer info exactly as fuzzed
(raw bytes to ``connect``); otherwise byte 1 says how many edits (0-4) to make to the real
peer's info, each read from the input: an edit picks a node of the JSON tree and
replaces it with an interesting value (a huge, negative or boundary integer, a float, a
bool, null, an address-like string, a container), deletes it, or adds an unknown key or
item, so the fuzzer reaches every field's validation. Zero edits connect for real.

Checks: ``connect`` accepts or raises ``sdr.ProtocolError``/``sdr.ConfigError`` and a
refused QP stays unconnected; after a successful connect a small step (a send that waits
for its CTS, progress, a control message where it can only reach the rig's own peer)
raises nothing but an ``sdr.SDRError``. Nothing is sent to addresses outside the rig.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from registry import Reader, target

import sdr

__all__ = ["fuzz_udp_connect", "fuzz_offload_connect", "fuzz_inproc_connect"]

_ATTR = sdr.QPAttr(
    mtu=256, chunk_size=512, max_message_size=4096, max_messages=8, generations=2, channels=2
)
_INTS = (
    0, 1, 2, -1, 255, 256, 4791, 65535, 65536, 70000, (1 << 24) - 1, 1 << 24, (1 << 31) - 1,
    (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, 1 << 64, 1 << 70, -(1 << 70), 10**400,
)  # fmt: skip
_FLOATS = (0.0, -0.0, 1.5, 4791.0, 1e300, float("inf"), float("nan"))
_TEXTS = (
    "", "127.0.0.1", "999.1.1.1", "127.1", "::1", "0.0.0.0", "255.255.255.255", "224.0.0.1",
    "localhost", "10.0.0.1", "x" * 300, "fe80::1", "1", "inproc", "udp", "offload",
)  # fmt: skip
_REFUSED = (sdr.ProtocolError, sdr.ConfigError)
_APP = bytes([200])  # an application control message type


def _nodes(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every node's path in a JSON tree (dict keys and list indices), the root first."""
    out = [path]
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _nodes(value, (*path, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            out += _nodes(value, (*path, index))
    return out


def _value(r: Reader, depth: int = 0) -> Any:
    """An interesting JSON value read from the input."""
    kind = r.u8() % 9
    if kind == 0:
        return _INTS[r.u8() % len(_INTS)]
    if kind == 1:
        return r.u64() - (1 << 63) if r.u8() & 1 else r.u32()
    if kind == 2:
        return _FLOATS[r.u8() % len(_FLOATS)]
    if kind == 3:
        return _TEXTS[r.u8() % len(_TEXTS)]
    if kind == 4:
        return r.take(r.u8() % 24).decode("latin-1")
    if kind == 5:
        return bool(r.u8() & 1)
    if kind == 6:
        return None
    if kind == 7 and depth < 3:
        return [_value(r, depth + 1) for _ in range(r.u8() % 4)]
    if kind == 8 and depth < 3:
        return {f"k{r.u8()}": _value(r, depth + 1) for _ in range(r.u8() % 3)}
    return r.u16()


def _edit(tree: dict[str, Any], r: Reader) -> None:
    """One edit of the info tree, in place."""
    nodes = _nodes(tree)[1:]  # not the root: the raw mode covers any document
    path = nodes[r.u16() % len(nodes)]
    op = r.u8() % 4
    parent: Any = tree
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if op in (0, 1):
        parent[last] = _value(r)
    elif op == 2:
        if isinstance(parent, dict):
            del parent[last]
        else:
            parent.pop(last)
    elif isinstance(parent, dict):
        parent[f"extra{r.u8()}"] = _value(r)
    else:
        parent.append(copy.deepcopy(parent[last]) if r.u8() & 1 else _value(r))


def _peer_info(data: bytes, real: bytes) -> bytes:
    """The bytes handed to connect(): raw fuzz bytes, or the real info with edits."""
    r = Reader(data)
    mode = r.u8()
    if mode & 0x80:
        return r.rest()
    tree = json.loads(real)
    for _ in range(r.u8() % 5):
        if isinstance(tree, dict) and tree:
            _edit(tree, r)
    return json.dumps(tree).encode()


class _Rig:
    """A context for the QP under test and a real peer QP whose info is altered."""

    def __init__(self, ctx: sdr.Context, peer_ctx: sdr.Context) -> None:
        self.ctx, self.peer_ctx = ctx, peer_ctx
        self.peer = peer_ctx.create_qp(_ATTR)
        self.info = self.peer.info()
        self.memory = ctx.register(bytearray(600))

    def run(self, data: bytes, control_ok: Any) -> None:
        """Connect a fresh QP to the (altered) info; after success, one small step."""
        qp = self.ctx.create_qp(_ATTR)
        try:
            try:
                qp.connect(_peer_info(data, self.info))
            except _REFUSED:
                assert not qp.connected
                return
            assert qp.connected
            try:
                qp.post_send(self.memory, 0, 600, imm=7, cts_timeout=0.001)
                qp.progress()
                if control_ok(qp.transport_qp):  # only where the rig's own peer listens
                    qp.send_control(_APP + data[:32])
                qp.progress()
                qp.counters()
            except sdr.SDRError:
                pass
        finally:
            qp.close()
            self.ctx._qps.remove(qp)


_RIGS: dict[str, _Rig] = {}


def _udp_rig() -> _Rig:
    rig = _RIGS.get("udp")
    if rig is None:
        from sdr.backends.udp import UdpTransport

        def make(seed: int) -> sdr.Context:  # two paths: the info lists its ports too
            transport = UdpTransport(
                port=0, socket_buffer=1 << 16, prefault=False, seed=seed, paths=2
            )
            return sdr.Context(backend=transport)

        rig = _RIGS["udp"] = _Rig(make(11), make(12))
    return rig


@target("udp_connect")
def fuzz_udp_connect(data: bytes) -> None:
    """Altered UDP peer info into connect(): refused cleanly, or a QP that works."""
    rig = _udp_rig()
    peer = rig.peer.transport_qp
    home = (peer.transport.host, peer.transport.control_port)
    rig.run(data, lambda tqp: tqp.peer_control == home)


def _offload_rig(wire: str) -> _Rig:
    rig = _RIGS.get(wire)
    if rig is None:
        from sdr.backends.offload import OffloadTransport

        def make() -> sdr.Context:
            return sdr.Context(backend=OffloadTransport(progress="cpu", wire=wire))

        rig = _RIGS[wire] = _Rig(make(), make())
    return rig


@target("offload_connect")
def fuzz_offload_connect(data: bytes) -> None:
    """Altered offload peer info (simple or RoCE wire) into connect()."""
    rig = _offload_rig("roce" if data[:1] and data[0] & 1 else "simple")
    home = tuple(rig.peer.transport_qp.control_sock.getsockname())
    rig.run(data, lambda tqp: tqp._peer_control == home)


def _inproc_rig() -> _Rig:
    rig = _RIGS.get("inproc")
    if rig is None:
        from sdr.backends.inproc import InprocNetwork, InprocTransport

        network = InprocNetwork(seed=3)

        def make() -> sdr.Context:
            return sdr.Context(backend=InprocTransport(network=network))

        rig = _RIGS["inproc"] = _Rig(make(), make())
    return rig


@target("inproc_connect")
def fuzz_inproc_connect(data: bytes) -> None:
    """Altered in-process peer info into connect() (messages stay on the rig's wire)."""
    rig = _inproc_rig()
    rig.run(data, lambda tqp: True)
