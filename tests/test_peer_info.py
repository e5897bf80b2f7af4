"""Peer info is input from the network: every field is validated at connect().

Altered info (a host that is no address, a port of 70000, a QPN of 2^70, an rkey of 2^32,
wrong types, missing keys, objects that are not objects) must fail at ``qp.connect()``
with an ``sdr.ProtocolError`` or ``sdr.ConfigError`` that names the field and the value,
leave the QP unconnected and usable, and never surface later inside ``progress()`` as a
bare ``OSError``/``OverflowError``/``struct.error``. A QP connects once.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from udp_pairs import UdpPair

import sdr
from sdr import peer_info as pi
from sdr.backends.inproc import InprocNetwork, ManualClock

ATTR = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="64KiB", channels=2)
Info = dict[str, Any]


# --- the validator ------------------------------------------------------------------------


def test_field_int_accepts_the_range_and_names_field_value_and_range() -> None:
    assert pi.field_int({"n": 5}, "n", 0, 10) == 5
    for bad in (11, -1, True, 5.0, "5", None, [5]):
        with pytest.raises(
            sdr.ProtocolError, match=r"peer info\.n must be an integer in \[0, 10\]"
        ):
            pi.field_int({"n": bad}, "n", 0, 10)
    with pytest.raises(sdr.ProtocolError, match=r"lacks the field 'n'"):
        pi.field_int({}, "n", 0, 10)
    with pytest.raises(sdr.ProtocolError, match=r"\(400 digits\)"):
        pi.field_int({"n": 10**399}, "n", 0, 10)


def test_field_host_takes_literals_and_optionally_names_without_dns() -> None:
    assert pi.field_host({"h": "127.0.0.1"}, "h", ipv4_only=True) == "127.0.0.1"
    assert pi.field_host({"h": "::1"}, "h") == "::1"
    assert pi.field_host({"h": "fe80:0:0::1"}, "h") == "fe80::1"  # canonical form
    assert pi.field_host({"h": "node-7.dc1.example"}, "h", names=True) == "node-7.dc1.example"
    for bad in ("999.1.1.1", "", "127.1", "a..b", "-x.example", "x" * 300, 5, None, "1.2.3"):
        with pytest.raises(sdr.ProtocolError, match=r"peer info\.h must be"):
            pi.field_host({"h": bad}, "h", names=True)
    with pytest.raises(sdr.ProtocolError, match="IPv6"):
        pi.field_host({"h": "::1"}, "h", ipv4_only=True)
    with pytest.raises(sdr.ProtocolError, match="must be an IPv4 address"):
        pi.field_host({"h": "localhost"}, "h", ipv4_only=True, names=True)
    for not_unicast in ("0.0.0.0", "224.0.0.1", "255.255.255.255", "::"):
        with pytest.raises(sdr.ProtocolError, match="unicast"):
            pi.field_host({"h": not_unicast}, "h")
    assert pi.field_host({"h": "0.0.0.0"}, "h", unicast=False) == "0.0.0.0"


def test_ports_addresses_lists_and_grids() -> None:
    assert pi.field_port({"p": 4791}, "p") == 4791
    for bad in (0, 65536, 70000, -1, "4791", True):
        with pytest.raises(
            sdr.ProtocolError, match=r"peer info\.p must be an integer in \[1, 65535\]"
        ):
            pi.field_port({"p": bad}, "p")
    assert pi.field_address({"a": ["10.0.0.1", 9]}, "a", ipv4_only=True) == ("10.0.0.1", 9)
    for bad in (["10.0.0.1"], "10.0.0.1:9", {"host": "x"}, ["10.0.0.1", 9, 1]):
        with pytest.raises(sdr.ProtocolError, match=r"peer info\.a must be a \[host, port\] pair"):
            pi.field_address({"a": bad}, "a")
    assert pi.check_int_grid([[2, 3], [4, 5]], "q", 2, 2, 2, 9, distinct=True) == [[2, 3], [4, 5]]
    with pytest.raises(sdr.ConfigError, match=r"q has 1 entries, this QP expects 2"):
        pi.check_int_grid([[2, 3]], "q", 2, 2, 2, 9)
    with pytest.raises(sdr.ConfigError, match=r"q\[1\] has 3 entries"):
        pi.check_int_grid([[2, 3], [4, 5, 6]], "q", 2, 2, 2, 9)
    with pytest.raises(sdr.ProtocolError, match=r"q\[1\]\[0\] must be an integer in \[2, 9\]"):
        pi.check_int_grid([[2, 3], [1, 5]], "q", 2, 2, 2, 9)
    with pytest.raises(sdr.ProtocolError, match=r"q\[1\]\[1\] repeats the value 3"):
        pi.check_int_grid([[2, 3], [4, 3]], "q", 2, 2, 2, 9, distinct=True)
    with pytest.raises(sdr.ProtocolError, match="must be a JSON array, got dict"):
        pi.check_int_list({"a": 1}, "r", 2, 0, 9)
    with pytest.raises(sdr.ProtocolError, match="must be a JSON object, got list"):
        pi.require_object([1], "peer info.transport")
    with pytest.raises(sdr.ProtocolError, match=r"unknown field\(s\) 'x'"):
        pi.check_keys({"a": 1, "x": 2}, "t", ["a"])
    with pytest.raises(sdr.ProtocolError, match=r"lacks field\(s\) \['b'\]"):
        pi.check_keys({"a": 1}, "t", ["a", "b"])


# --- altered info against real QPs --------------------------------------------------------


def _set(key: str, value: Any) -> Callable[[Info], None]:
    def mutate(info: Info) -> None:
        info["transport"][key] = value

    return mutate


def _drop(key: str) -> Callable[[Info], None]:
    return lambda info: info["transport"].pop(key)


def _entry(key: str, value: Any, *index: int) -> Callable[[Info], None]:
    def mutate(info: Info) -> None:
        target = info["transport"][key]
        for i in index[:-1]:
            target = target[i]
        target[index[-1]] = value

    return mutate


UDP_CASES: dict[str, tuple[Callable[[Info], None], str]] = {
    "host 999.1.1.1": (_set("host", "999.1.1.1"), r"transport\.host must be an IPv4 address"),
    "host empty": (_set("host", ""), r"transport\.host must be an IPv4 address"),
    "host null": (_set("host", None), r"transport\.host"),
    "host a name": (_set("host", "localhost"), r"transport\.host"),
    "host IPv6": (_set("host", "::1"), r"transport\.host"),
    "host unspecified": (_set("host", "0.0.0.0"), r"transport\.host must be a unicast"),
    "host broadcast": (_set("host", "255.255.255.255"), r"transport\.host must be a unicast"),
    "port 70000": (_set("port", 70000), r"transport\.port must be an integer in \[1, 65535\]"),
    "port -1": (_set("port", -1), r"transport\.port .*got int -1"),
    "port a string": (_set("port", "4791"), r"transport\.port .*got str '4791'"),
    "port a bool": (_set("port", True), r"transport\.port"),
    "port a float": (_set("port", 4791.0), r"transport\.port"),
    "control port 70000": (_set("control_port", 70000), r"transport\.control_port"),
    "control id 2^40": (_set("control_id", 1 << 40), r"transport\.control_id .*1099511627776"),
    "control id -1": (_set("control_id", -1), r"transport\.control_id"),
    "QPN 2^70": (_entry("qpns", 1 << 70, 0, 0), r"transport\.qpns\[0\]\[0\] .*\[2, 16777215\]"),
    "QPN reserved 1": (_entry("qpns", 1, 1, 1), r"transport\.qpns\[1\]\[1\]"),
    "QPN a string": (_entry("qpns", "7", 0, 1), r"transport\.qpns\[0\]\[1\]"),
    "QPNs a dict": (_set("qpns", {"a": 1}), r"transport\.qpns must be a JSON array"),
    "QPN row a number": (_entry("qpns", 5, 2), r"transport\.qpns\[2\] must be a JSON array"),
    "QPN rows short": (lambda i: i["transport"]["qpns"].pop(), r"transport\.qpns has 3 entries"),
    "QPN row long": (lambda i: i["transport"]["qpns"][0].append(9), r"qpns\[0\] has 3 entries"),
    "QPNs repeated": (
        lambda i: i["transport"]["qpns"][1].__setitem__(0, i["transport"]["qpns"][0][0]),
        r"transport\.qpns\[1\]\[0\] repeats",
    ),
    "rkey 2^32": (_entry("rkeys", 1 << 32, 0), r"transport\.rkeys\[0\] .*\[0, 4294967295\]"),
    "rkey -1": (_entry("rkeys", -1, 3), r"transport\.rkeys\[3\]"),
    "rkey null": (_entry("rkeys", None, 1), r"transport\.rkeys\[1\] .*got null"),
    "rkeys short": (lambda i: i["transport"]["rkeys"].pop(), r"transport\.rkeys has 3 entries"),
    "rkeys a string": (_set("rkeys", "1234"), r"transport\.rkeys must be a JSON array"),
    "host missing": (_drop("host"), r"transport lacks field\(s\) \['host'\]"),
    "qpns missing": (_drop("qpns"), r"transport lacks field\(s\) \['qpns'\]"),
    "unknown field": (_set("extra", 1), r"transport has unknown field\(s\) 'extra'"),
    "transport a list": (
        lambda i: i.__setitem__("transport", [1]),
        r"transport must be a JSON object",
    ),
    "transport null": (
        lambda i: i.__setitem__("transport", None),
        r"transport must be a JSON object",
    ),
}

CORE_CASES: dict[str, tuple[Callable[[Info], None], str]] = {
    "not JSON": (lambda i: i.__setitem__("__raw__", b"{not json"), r"not valid JSON"),
    "a JSON list": (
        lambda i: i.__setitem__("__raw__", b"[1, 2]"),
        r"peer info must be a JSON object",
    ),
    "version a string": (lambda i: i.__setitem__("version", "1"), r"peer info\.version"),
    "version a bool": (lambda i: i.__setitem__("version", True), r"peer info\.version"),
    "version 2": (lambda i: i.__setitem__("version", 2), r"peer info version 2, expected 1"),
    "backend a number": (
        lambda i: i.__setitem__("backend", 5),
        r"peer info\.backend must be a string",
    ),
    "attr a list": (lambda i: i.__setitem__("attr", [1]), r"peer info\.attr must be a JSON object"),
    "attr mtu missing": (
        lambda i: i["attr"].pop("mtu"),
        r"peer info\.attr lacks field\(s\) \['mtu'\]",
    ),
    "attr mtu a string": (
        lambda i: i["attr"].__setitem__("mtu", "1024"),
        r"attr\.mtu must be an integer",
    ),
    "attr mtu a float": (
        lambda i: i["attr"].__setitem__("mtu", 1024.0),
        r"attr\.mtu must be an integer",
    ),
    "attr generations a bool": (
        lambda i: i["attr"].__setitem__("user_imm_bits", True),
        r"attr\.user_imm_bits must be an integer",
    ),
    "attr channels 2^70": (
        lambda i: i["attr"].__setitem__("channels", 1 << 70),
        r"attr\.channels must be an integer",
    ),
    "attr unknown": (lambda i: i["attr"].__setitem__("color", 3), r"attr has unknown field"),
    "unknown top-level": (lambda i: i.__setitem__("route", "x"), r"unknown field\(s\) 'route'"),
}


def _altered(info: bytes, mutate: Callable[[Info], None]) -> bytes:
    body = copy.deepcopy(json.loads(info))
    mutate(body)
    raw = body.pop("__raw__", None)
    return raw if raw is not None else json.dumps(body).encode()


@pytest.fixture
def udp() -> Iterator[UdpPair]:
    """Two UDP contexts on loopback, QPs created but not connected."""
    with UdpPair(ATTR, connect=False, socket_buffer=1 << 20) as pair:
        yield pair


def _message_flows(a: sdr.Context, b: sdr.Context, qa: sdr.QP, qb: sdr.QP) -> None:
    """A 5,000-byte message from qa to qb lands intact."""
    src = np.arange(5000, dtype=np.uint32).astype(np.uint8)
    dst = np.zeros_like(src)
    rh = qb.post_recv(b.register(dst))
    sh = qa.post_send(a.register(src), imm=9)
    for _ in range(20_000):
        if rh.record.arrived and sh.poll():
            break
        a.progress()
        b.progress()
        a.transport.wait(0.0005)
    assert rh.record.arrived and np.array_equal(src, dst) and rh.imm == 9


@pytest.mark.parametrize("case", sorted(UDP_CASES))
def test_udp_connect_refuses_altered_transport_info(udp: UdpPair, case: str) -> None:
    mutate, message = UDP_CASES[case]
    with pytest.raises((sdr.ProtocolError, sdr.ConfigError), match=message):
        udp.qa.connect(_altered(udp.qb.info(), mutate))
    assert not udp.qa.connected
    assert udp.qa.progress() == 0
    # the refusal left the QP as it was: the real info connects and carries a message
    udp.qa.connect(udp.qb.info())
    udp.qb.connect(udp.qa.info())
    _message_flows(udp.a, udp.b, udp.qa, udp.qb)


@pytest.mark.parametrize("case", sorted(CORE_CASES))
def test_connect_refuses_altered_core_info(udp: UdpPair, case: str) -> None:
    mutate, message = CORE_CASES[case]
    with pytest.raises((sdr.ProtocolError, sdr.ConfigError), match=message):
        udp.qa.connect(_altered(udp.qb.info(), mutate))
    assert not udp.qa.connected


def test_attribute_mismatch_is_a_config_error_naming_both_values(udp: UdpPair) -> None:
    info = _altered(udp.qb.info(), lambda i: i["attr"].__setitem__("mtu", 2048))
    with pytest.raises(sdr.ConfigError, match="mtu: ours 1024, peer 2048"):
        udp.qa.connect(info)


def test_backend_mismatch_is_a_config_error(udp: UdpPair) -> None:
    with pytest.raises(sdr.ConfigError, match="peer uses backend 'inproc'"):
        udp.qa.connect(_altered(udp.qb.info(), lambda i: i.__setitem__("backend", "inproc")))


def _inproc_pair() -> tuple[sdr.Context, sdr.Context, sdr.QP, sdr.QP, ManualClock]:
    clock = ManualClock()
    net = InprocNetwork(clock=clock)
    a, b = sdr.Context("inproc", network=net), sdr.Context("inproc", network=net)
    return a, b, a.create_qp(ATTR), b.create_qp(ATTR), clock


INPROC_CASES: dict[str, tuple[Callable[[Info], None], str]] = {
    "endpoint missing": (_drop("endpoint"), r"transport lacks field\(s\) \['endpoint'\]"),
    "endpoint null": (_set("endpoint", None), r"transport\.endpoint must be an integer"),
    "endpoint a string": (_set("endpoint", "x"), r"transport\.endpoint .*got str 'x'"),
    "endpoint 2^70": (_set("endpoint", 1 << 70), r"transport\.endpoint"),
    "endpoint -1": (_set("endpoint", -1), r"transport\.endpoint .*got int -1"),
    "endpoint a float": (_set("endpoint", 1.5), r"transport\.endpoint .*got float 1\.5"),
    "endpoint a bool": (_set("endpoint", True), r"transport\.endpoint .*got bool"),
    "network missing": (_drop("network"), r"transport lacks field\(s\) \['network'\]"),
    "network a string": (_set("network", "1"), r"transport\.network must be an integer"),
    "network another": (_set("network", 10**6), r"share one InprocNetwork"),
    "unknown field": (_set("hops", 3), r"transport has unknown field\(s\) 'hops'"),
    "transport a string": (
        lambda i: i.__setitem__("transport", "x"),
        r"transport must be a JSON object",
    ),
}


@pytest.mark.parametrize("case", sorted(INPROC_CASES))
def test_inproc_connect_refuses_altered_transport_info(case: str) -> None:
    mutate, message = INPROC_CASES[case]
    a, b, qa, qb, clock = _inproc_pair()
    with pytest.raises((sdr.ProtocolError, sdr.ConfigError), match=message):
        qa.connect(_altered(qb.info(), mutate))
    assert not qa.connected
    qa.connect(qb.info())
    qb.connect(qa.info())
    _message_flows(a, b, qa, qb)


def test_signed_info_fields_are_accepted_by_a_context_without_secret() -> None:
    """nonce and hmac are known fields: a peer with a secret may talk to one without."""
    net = InprocNetwork()
    secret = "a shared secret of the job"
    a, b = sdr.Context("inproc", network=net), sdr.Context("inproc", network=net, secret=secret)
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    assert "hmac" in json.loads(qb.info())
    qa.connect(qb.info())
    assert qa.connected


# --- a QP connects once -------------------------------------------------------------------


def test_a_second_connect_is_refused_at_connect_time(udp: UdpPair) -> None:
    udp.qa.connect(udp.qb.info())
    udp.qb.connect(udp.qa.info())
    with pytest.raises(sdr.ConfigError, match="already connected.*create a new QP"):
        udp.qa.connect(udp.qb.info())
    restarted = udp.b.create_qp(ATTR)  # the peer's new incarnation
    with pytest.raises(sdr.ConfigError, match="already connected"):
        udp.qa.connect(restarted.info())
    # the refused connect changed nothing: the first connection still works
    _message_flows(udp.a, udp.b, udp.qa, udp.qb)
    # and a new QP on the same context connects to the restarted peer
    fresh = udp.a.create_qp(ATTR)
    fresh.connect(restarted.info())
    restarted.connect(fresh.info())
    _message_flows(udp.a, udp.b, fresh, restarted)
