"""The native forwarder (sdr.backends.wan._forward) against the settings and the reference.

One suite runs over both forwarders and measures what crosses the link: delay never below
the set one-way delay, the delivered rate at the link rate, losses, duplicates and
corruptions exactly the link model's (same seed, same packets, same decisions), queue
drops counted. It runs through the UDP relay (no root) and, as root, through TUN
namespaces. Then unit tests of the C module's bound checks (no root).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from sdr.backends.wan import LinkSpec, RelayLink, TunLink, can_use_namespaces, netns_exec
from sdr.backends.wan.forwarder import REPORT_KEYS, Forwarder
from sdr.backends.wan.native_forwarder import (
    NATIVE_ERROR,
    NativeForwarder,
    choose_forwarder,
    native_unsupported,
)
from sdr.backends.wan.udp_relay import relay_pairs
from sdr.errors import ConfigError
from sdr.simulator.link_model import LOSS, LinkDirection
from sdr.simulator.loss import GilbertElliott, SizeDependent

try:
    from sdr.backends.wan import _forward  # type: ignore[attr-defined]
except ImportError:
    _forward = None

needs_native = pytest.mark.skipif(_forward is None, reason=f"not built: {NATIVE_ERROR}")
needs_root = pytest.mark.skipif(bool(can_use_namespaces()), reason=str(can_use_namespaces()))
FORWARDERS = [pytest.param("native", marks=needs_native), "python"]
_HEADER = struct.Struct("<Id")  # sequence number, send time (time.monotonic)


def _predicted(spec: LinkSpec, n: int, size: int) -> dict[str, set[int]]:
    """The link model's own decisions for ``n`` packets offered one by one."""
    d = LinkDirection(spec).offer(np.arange(n) * 1.0, np.full(n, float(size)))
    out = {"lost": set(np.flatnonzero(d.cause == LOSS).tolist())}
    if d.duplicate_at is not None:
        out["dup"] = set(np.flatnonzero(d.duplicate_at == d.duplicate_at).tolist())
    if d.corrupt is not None:
        out["bad"] = set(np.flatnonzero(d.corrupt).tolist())
    return out


def _relay_run(
    spec: LinkSpec, forwarder: str, n: int, size: int, gap_s: float = 0.0
) -> tuple[list[tuple[int, float, bytes]], dict]:
    """Send ``n`` datagrams of ``size`` bytes A -> B through a relay link; returns what B
    got as (sequence, one-way delay, datagram) and the link's summary."""
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    for s in (a, b):
        s.bind(("127.0.0.1", 0))
    got = []
    with RelayLink(
        spec, [a.getsockname()], [b.getsockname()], reseal=False, forwarder=forwarder
    ) as relay:
        assert relay.forwarder == forwarder
        to_b = relay.for_a(0)
        for i in range(n):
            a.sendto(_HEADER.pack(i, time.monotonic()).ljust(size, bytes([i % 251])), to_b)
            if gap_s:
                time.sleep(gap_s)
        b.settimeout(1.0 + 2 * spec.one_way_delay)
        try:
            while True:
                data = b.recv(65536)
                seq, sent = _HEADER.unpack_from(data)
                got.append((seq, time.monotonic() - sent, data))
        except TimeoutError:
            pass
    a.close()
    b.close()
    return got, relay.summary


@pytest.mark.parametrize("burst", [False, True], ids=["random", "burst"])
@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_delay_and_losses_are_the_settings_and_the_models(forwarder, burst):
    # Gilbert-Elliott: 1/3 of the time bad (loss 0.3), so the same 10% long-run rate
    model = GilbertElliott(p_gb=0.1, p_bg=0.2, loss_bad=0.3) if burst else 0.1
    spec = LinkSpec(rate="200Mbit/s", rtt="40ms", loss=model, seed=7)
    n = 400
    got, summary = _relay_run(spec, forwarder, n, 1000)
    delays = np.array([d for _, d, _ in got])
    assert delays.min() >= spec.one_way_delay  # never early
    # queueing of the whole burst is 16 ms at 200 Mbit/s; the rest is slack for a busy host
    assert np.median(delays) < spec.one_way_delay + 0.05
    lost = set(range(n)) - {seq for seq, _, _ in got}
    assert lost == _predicted(spec, n, 1000)["lost"]  # the link model's decisions, exactly
    if not burst:  # (bursts widen the spread well past a binomial's)
        assert abs(len(lost) - 0.1 * n) <= 5 * (n * 0.1 * 0.9) ** 0.5
    report = summary["report"]["a_to_b"]
    assert set(report) == set(REPORT_KEYS)
    kind, other = ("drops_burst_loss", "drops_random_loss")[:: 1 if burst else -1]
    assert report[kind] == len(lost) > 0 and report[other] == 0
    assert report["packets"] == n and report["delivered"] == len(got)
    assert report["set_delay_s"] == spec.one_way_delay


@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_delivered_rate_is_the_link_rate(forwarder):
    spec = LinkSpec(rate="50Mbit/s", rtt="10ms", queue="4MiB", seed=1)
    n, size = 300, 8000
    got, summary = _relay_run(spec, forwarder, n, size)
    assert len(got) == n
    # arrival times: send time + delay; the sender put the whole burst out at once, so the
    # spread of arrivals is the serialization of the burst at the link rate
    stamps = np.sort([_HEADER.unpack_from(p)[1] + d for _, d, p in got])
    rate = (n - 1) * size * 8 / (stamps[-1] - stamps[0])
    assert 0.8 * 50e6 < rate < 1.05 * 50e6
    assert summary["report"]["a_to_b"]["drops_queue"] == 0


@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_a_full_queue_drops_the_tail_and_counts_it(forwarder):
    spec = LinkSpec(rate="20Mbit/s", rtt="2ms", queue="64KiB", seed=2)
    n, size = 200, 8000
    got, summary = _relay_run(spec, forwarder, n, size)
    report = summary["report"]["a_to_b"]
    assert report["drops_queue"] > 0
    assert len(got) == n - report["drops_queue"] >= 8  # the queue holds 8 such packets
    assert summary["a_to_b"]["max_backlog_bytes"] <= 64 * 1024


@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_duplicates_and_corruptions_are_the_models(forwarder):
    spec = LinkSpec(rate="100Mbit/s", rtt="4ms", duplicate=0.2, corrupt=0.2, seed=11)
    n, size = 250, 400  # the fill byte (sequence % 251) names each packet
    got, summary = _relay_run(spec, forwarder, n, size, gap_s=0.0005)
    want = _predicted(spec, n, size)
    copies: dict[int, int] = {}
    bad = set()
    for _, _, data in got:
        fill = data[12:]
        seq = max(set(fill), key=fill.count)  # a flipped bit changes one byte at most
        copies[seq] = copies.get(seq, 0) + 1
        if fill != bytes([seq]) * len(fill) or data[:4] != struct.pack("<I", seq):
            bad.add(seq)
    assert {seq for seq, k in copies.items() if k == 2} == want["dup"]
    # a flip in the 8 bytes of the send time goes unseen here
    assert bad <= want["bad"] and len(want["bad"] - bad) <= 5
    report = summary["report"]["a_to_b"]
    assert report["duplicated"] == len(want["dup"]) and report["corrupted"] == len(want["bad"])
    assert len(got) == n + len(want["dup"])


_TUN_SINK = textwrap.dedent("""
    import json, socket, struct, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], 9997)); s.settimeout(3)
    out = []
    try:
        while True:
            data = s.recv(65536)
            seq, sent = struct.unpack_from("<Id", data)
            out.append((seq, time.monotonic() - sent))
    except TimeoutError:
        pass
    print(json.dumps(out))
""")
_TUN_SOURCE = textwrap.dedent("""
    import socket, struct, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    time.sleep(0.3)
    for i in range(int(sys.argv[2])):
        s.sendto(struct.pack("<Id", i, time.monotonic()).ljust(1200, b"x"), (sys.argv[1], 9997))
        time.sleep(0.001)
""")


@needs_root
@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_tun_link_delay_and_loss(forwarder):
    import json

    spec = LinkSpec(rate="100Mbit/s", rtt="20ms", loss=0.05, seed=3)
    n = 300
    with TunLink(spec, forwarder=forwarder) as link:
        assert link.forwarder == forwarder
        sink = subprocess.Popen(
            netns_exec(link.ns_b, sys.executable, "-c", _TUN_SINK, link.addr_b),
            stdout=subprocess.PIPE,
            text=True,
        )
        subprocess.run(
            netns_exec(link.ns_a, sys.executable, "-c", _TUN_SOURCE, link.addr_b, str(n)),
            check=True,
            timeout=60,
        )
        got = json.loads(sink.communicate(timeout=60)[0])
    delays = np.array([d for _, d in got])
    assert delays.min() >= spec.one_way_delay and np.median(delays) < spec.one_way_delay + 0.05
    lost = n - len(got)
    report = link.summary["report"]["a_to_b"]
    assert report["drops_random_loss"] == lost and abs(lost - 15) <= 5 * (n * 0.05) ** 0.5
    assert link.summary["forwarder"] == forwarder


# --- selection ------------------------------------------------------------------------------


def test_choice_follows_the_argument_then_the_environment(monkeypatch):
    pairs = relay_pairs([("127.0.0.1", 1)], [("127.0.0.1", 2)])
    try:
        spec = LinkSpec()
        assert choose_forwarder("python", pairs, spec, spec) == "python"
        monkeypatch.setenv("SDR_FORWARDER", "python")
        assert choose_forwarder(None, pairs, spec, spec) == "python"
        monkeypatch.setenv("SDR_FORWARDER", "fast")
        with pytest.raises(ConfigError, match="fast"):
            choose_forwarder(None, pairs, spec, spec)
        monkeypatch.delenv("SDR_FORWARDER")
        if _forward is not None:
            assert choose_forwarder(None, pairs, spec, spec) == "native"
        sized = LinkSpec(loss=SizeDependent(1e-3))
        assert "size" in (native_unsupported(pairs, sized, sized) or "")
        assert choose_forwarder("auto", pairs, sized, sized) == "python"
        with pytest.raises(ConfigError, match="size"):
            choose_forwarder("native", pairs, sized, sized)
        resealing = relay_pairs([("127.0.0.1", 1)], [("127.0.0.1", 2)], reseal=True)
        assert "ICRC" in (native_unsupported(resealing, spec, spec) or "")
        for pair in resealing:
            for end in pair:
                end.close()
    finally:
        for pair in pairs:
            for end in pair:
                end.close()


@needs_native
def test_both_forwarders_report_the_same_keys():
    pairs = relay_pairs([("127.0.0.1", 1)], [("127.0.0.1", 2)])
    spec = LinkSpec(loss=GilbertElliott(p_gb=0.01, p_bg=0.25))
    try:
        native = NativeForwarder(pairs, spec, spec, max_packet=9000).report()
        python = Forwarder(pairs, spec, spec).report()
    finally:
        for pair in pairs:
            for end in pair:
                end.close()
    assert native.keys() == python.keys() == {"a_to_b", "b_to_a"}
    for d in ("a_to_b", "b_to_a"):
        assert list(native[d]) == list(python[d]) == list(REPORT_KEYS)


# --- the C module's bound checks (no root) ------------------------------------------------


def _pair() -> tuple[socket.socket, socket.socket]:
    inner, outer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    inner.setblocking(False)
    outer.settimeout(0.5)
    return inner, outer


def _loop(max_packet=1000, slots=64, delay=0.0, skip=0):
    a_in, a_user = _pair()
    b_out, b_user = _pair()
    loop = _forward.Loop(
        [(a_in.fileno(), 0, 0, 0), (b_out.fileno(), 0, 0, 0)],
        (1e9, 1e9),
        (delay, delay),
        (1e7, 1e7),
        [[], []],
        skip,
        max_packet,
        slots,
        1e-3,
    )
    return loop, (a_in, a_user, b_out, b_user)


def _columns(n, **overrides):
    cols = {
        "loss": np.zeros(n, np.uint8),
        "extra": np.zeros(n),
        "dup": np.zeros(n, np.uint8),
        "corrupt": np.zeros(n, np.uint8),
        "where": np.zeros(n),
        "bit": np.zeros(n, np.uint8),
    }
    cols.update(overrides)
    return [cols[k] for k in ("loss", "extra", "dup", "corrupt", "where", "bit")]


def _drain(sock: socket.socket) -> list[bytes]:
    out = []
    try:
        while True:
            out.append(sock.recv(65536))
    except (TimeoutError, BlockingIOError):
        return out


@needs_native
@pytest.mark.parametrize(
    "override, error",
    [
        ({"loss": np.zeros(8, np.int32)}, TypeError),
        ({"extra": np.zeros(8, np.float32)}, TypeError),
        ({"dup": np.zeros((2, 4), np.uint8)}, TypeError),
        ({"where": np.zeros(7)}, ValueError),
        ({"loss": np.full(8, 3, np.uint8)}, ValueError),
        ({"bit": np.full(8, 8, np.uint8)}, ValueError),
        ({"where": np.ones(8)}, ValueError),
        ({"extra": np.full(8, np.nan)}, ValueError),
        ({"extra": np.full(8, -1e-3)}, ValueError),
        ({"corrupt": np.full(8, 2, np.uint8)}, ValueError),
    ],
)
def test_feed_rejects_bad_columns_and_keeps_nothing(override, error):
    loop, socks = _loop()
    with pytest.raises(error):
        loop.feed(0, *_columns(8, **override))
    assert loop.pending(0) == 0
    assert loop.feed(0, *_columns(8)) == 8 and loop.pending(0) == 8
    for s in socks:
        s.close()


@needs_native
def test_feed_rejects_more_decisions_than_the_ring_holds_and_bad_directions():
    loop, socks = _loop()
    loop.feed(1, *_columns(_forward.RING - 4))
    with pytest.raises(ValueError, match="room for 4"):
        loop.feed(1, *_columns(5))
    assert loop.room(1) == 4
    for bad in (2, -1):
        with pytest.raises(ValueError, match="direction"):
            loop.pending(bad)
    for s in socks:
        s.close()


@needs_native
@pytest.mark.parametrize(
    "ports, kw",
    [
        ([(3, 0, 0, 0)], {}),  # odd number of ports
        ([(-1, 0, 0, 0), (4, 0, 0, 0)], {}),
        ([(3, 2, 0, 0), (4, 0, 0, 0)], {}),  # unknown kind
        ([(3, 1, 0, 70000), (4, 1, 0, 1)], {}),
        ([(3, 0, 0, 0), (4, 0, 0, 0)], {"max_packet": 0}),
        ([(3, 0, 0, 0), (4, 0, 0, 0)], {"slots": 1}),
        ([(3, 0, 0, 0), (4, 0, 0, 0)], {"rates": (0.0, 1e9)}),
        ([(3, 0, 0, 0), (4, 0, 0, 0)], {"blackouts": [[(2.0, 1.0)], []]}),
    ],
)
def test_loop_rejects_bad_geometry(ports, kw):
    args = {
        "ports": ports,
        "rates": (1e9, 1e9),
        "delays": (0.0, 0.0),
        "queues": (1e6, 1e6),
        "blackouts": [[], []],
        "corrupt_skip": 0,
        "max_packet": 1000,
        "slots": 64,
        "late_after": 1e-3,
    }
    args.update(kw)
    with pytest.raises(ValueError):
        _forward.Loop(**args)


@needs_native
def test_oversize_packets_are_dropped_counted_and_use_their_decision():
    loop, (a_in, a_user, b_out, b_user) = _loop(max_packet=1000)
    loop.feed(0, *_columns(_forward.LOW_WATER + 10))
    loop.feed(1, *_columns(_forward.LOW_WATER + 10))
    a_user.send(b"x" * 1001)
    a_user.send(b"y" * 1000)
    a_user.send(b"z" * 60000)
    loop.run(0.05)
    assert _drain(b_user) == [b"y" * 1000]
    stats = loop.stats(0)
    assert stats["oversize"] == 2 and stats["forwarded"] == 1 and stats["packets"] == 3
    assert loop.pending(0) == _forward.LOW_WATER + 7
    for s in (a_in, a_user, b_out, b_user):
        s.close()


@needs_native
def test_decisions_are_applied_in_order_and_corruption_stays_in_bounds():
    loop, (a_in, a_user, b_out, b_user) = _loop(skip=4)
    n = _forward.LOW_WATER + 10
    loss = np.zeros(n, np.uint8)
    loss[1], loss[2] = 1, 2
    dup, bad, where, bit = (np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(n),
                            np.zeros(n, np.uint8))  # fmt: skip
    dup[3] = 1
    bad[4], where[4], bit[4] = 1, np.nextafter(1.0, 0), 7  # the last byte's top bit
    bad[5] = 1  # a packet no longer than the skip: counted, left alone
    loop.feed(0, *_columns(n, loss=loss, dup=dup, corrupt=bad, where=where, bit=bit))
    loop.feed(1, *_columns(n))
    for i, size in enumerate((10, 10, 10, 10, 10, 4)):
        a_user.send(bytes([i]) * size)
    loop.run(0.05)
    got = _drain(b_user)
    assert got == [b"\0" * 10, b"\3" * 10, b"\3" * 10, b"\4" * 9 + b"\x84", b"\5" * 4]
    s = loop.stats(0)
    assert (s["loss_random"], s["loss_burst"], s["duplicated"], s["corrupted"]) == (1, 1, 1, 2)
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()


@needs_native
def test_the_delay_line_holds_packets_and_an_empty_pool_drops_them():
    loop, (a_in, a_user, b_out, b_user) = _loop(slots=16, delay=0.2)
    n = _forward.LOW_WATER + 100
    extra = np.zeros(n)
    extra[0] = 0.1
    loop.feed(0, *_columns(n, extra=extra))
    loop.feed(1, *_columns(n))
    for i in range(40):
        a_user.send(bytes([i]) * 20)
    t = time.monotonic()
    loop.run(0.05)
    assert _drain(b_user) == []  # nothing before the set delay
    s = loop.stats(0)
    assert s["pool_drops"] == 24 and s["in_flight"] == 16
    while loop.stats(0)["forwarded"] < 16 and time.monotonic() - t < 5:
        loop.run(0.05)
    got = _drain(b_user)
    assert time.monotonic() - t >= 0.3
    assert [p[0] for p in got] == [*range(1, 16), 0]  # the first was held 0.1 s more
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()


@needs_native
def test_refusals_print_their_floating_point_values():
    """PyErr_Format has no %g: the messages are formatted in C first (they used to show a
    literal '%g')."""
    with pytest.raises(ValueError, match=r"got 0, 16, 1, 0\.25$"):
        _forward.Loop([(0, 0, 0, 0), (1, 0, 0, 0)], (1e9, 1e9), (0.0, 0.0), (1e7, 1e7),
                      [[], []], 0, 16, 1, 0.25)  # fmt: skip
    loop, socks = _loop()
    with pytest.raises(ValueError, match=r"got -1, 0, 0"):
        loop.run(-1.0, 0, 0)
    for sock in socks:
        sock.close()
