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
from sdr.backends.wan.gso_reference import (
    GSO_TCPV4,
    GSO_UDP_L4,
    NEEDS_CSUM,
    VNET,
    checksum_ok,
    finish_checksum,
    gso_frame,
    ip_packet,
    wire_packets,
)
from sdr.backends.wan.native_forwarder import (
    NATIVE_ERROR,
    NativeForwarder,
    choose_forwarder,
    choose_offload,
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
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not name it


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
) -> tuple[list[tuple[int, float, bytes]], dict, np.ndarray]:
    """Send ``n`` datagrams of ``size`` bytes A -> B through a relay link; returns what B
    got as (sequence, one-way delay, datagram), the link's summary, and the kernel's
    receive timestamps of those datagrams (seconds; when each reached B's socket, however
    late this process read it)."""
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    b.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    for s in (a, b):
        s.bind(("127.0.0.1", 0))
    got, kernel = [], []
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
                data, ancillary, _, _ = b.recvmsg(65536, 64)
                seq, sent = _HEADER.unpack_from(data)
                got.append((seq, time.monotonic() - sent, data))
                kernel.append(_kernel_stamp(ancillary))
        except TimeoutError:
            pass
    a.close()
    b.close()
    return got, relay.summary, np.array(kernel)


def _kernel_stamp(ancillary: list[tuple[int, int, bytes]]) -> float:
    """The SO_TIMESTAMPNS receive time among a datagram's control messages."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return seconds + nanoseconds * 1e-9
    raise AssertionError("no receive timestamp")


@pytest.mark.parametrize("burst", [False, True], ids=["random", "burst"])
@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_delay_and_losses_are_the_settings_and_the_models(forwarder, burst):
    # Gilbert-Elliott: 1/3 of the time bad (loss 0.3), so the same 10% long-run rate
    model = GilbertElliott(p_gb=0.1, p_bg=0.2, loss_bad=0.3) if burst else 0.1
    spec = LinkSpec(rate="200Mbit/s", rtt="40ms", loss=model, seed=7)
    n = 400
    got, summary, _ = _relay_run(spec, forwarder, n, 1000)
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
    got, summary, kernel = _relay_run(spec, forwarder, n, size)
    assert len(got) == n
    report = summary["report"]["a_to_b"]
    assert report["drops_queue"] == 0
    # The sender put the whole burst out at once, so the link's schedule spaces the copies
    # by their serialization at the link rate. Measured where the forwarder hands them
    # over (the kernel's receive stamps, not when this process got round to reading), the
    # spread is that schedule's, shortened at most by how late the forwarder wrote the
    # first copies (its own report): a forwarder that did not serialize would spread them
    # over far less.
    span = kernel.max() - kernel.min()
    schedule = (n - 1) * size * 8 / 50e6
    assert span + report["max_lateness_s"] >= schedule / 1.05
    # and not much slower than the rate either (a loose bound: a starved sender or
    # forwarder stretches the schedule, and that is the host, not the link)
    assert span <= 2 * schedule


@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_a_full_queue_drops_the_tail_and_counts_it(forwarder):
    spec = LinkSpec(rate="20Mbit/s", rtt="2ms", queue="64KiB", seed=2)
    n, size = 200, 8000
    got, summary, _ = _relay_run(spec, forwarder, n, size)
    report = summary["report"]["a_to_b"]
    assert report["drops_queue"] > 0
    assert len(got) == n - report["drops_queue"] >= 8  # the queue holds 8 such packets
    assert summary["a_to_b"]["max_backlog_bytes"] <= 64 * 1024


@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_duplicates_and_corruptions_are_the_models(forwarder):
    spec = LinkSpec(rate="100Mbit/s", rtt="4ms", duplicate=0.2, corrupt=0.2, seed=11)
    n, size = 250, 400  # the fill byte (sequence % 251) names each packet
    got, summary, _ = _relay_run(spec, forwarder, n, size, gap_s=0.0005)
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


class _SlowPort:
    """A port whose packet arrives while the forwarder is descheduled: the clock moves on
    by ``stall`` s inside ``read_many``, and what the read returns came during it."""

    def __init__(self, clock: list[float], stall: float, packets: list[bytes]) -> None:
        self.clock, self.stall, self.packets = clock, stall, packets
        self.ready, self.writer = socket.socketpair()
        self.writer.send(b"x")  # readable, so select() hands the forwarder this port
        self.written: list[tuple[float, bytes]] = []

    def fileno(self) -> int:
        return self.ready.fileno()

    def read_many(self, limit: int) -> list[bytes]:
        self.clock[0] += self.stall
        got, self.packets = self.packets[:limit], self.packets[limit:]
        return got

    def write(self, packet: bytes) -> None:
        self.written.append((self.clock[0], packet))


def test_a_packet_that_came_while_the_forwarder_slept_is_not_stamped_early():
    # a stamp taken before the read (as the loop once did) predates the packet by the
    # stall, and the copy left that much under the set delay: 9.2 ms on a 10 ms link
    spec = LinkSpec(rate="1Gbit/s", rtt="20ms", queue="1MiB", seed=1)
    clock = [100.0]
    a = _SlowPort(clock, 0.004, [b"p" * 100])
    b = _SlowPort(clock, 0.0, [])
    fwd = Forwarder([(a, b)], spec, spec, clock=lambda: clock[0])
    arrived = clock[0] + a.stall  # when the packet came: during the read
    fwd.run(lambda: bool(b.written) or clock[0] > 101.0, until=None)
    assert fwd.stats["forwarded"] == 1
    (when, _), due = b.written[0], fwd.report()["a_to_b"]
    assert when >= arrived + spec.one_way_delay
    assert due["packets"] == 1


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
        assert forwarder == "native" or link.offload == 0  # offloads: the native one only
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


_GSO_SOURCE = textwrap.dedent("""
    import socket, struct, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_UDP, 103, 1200)  # UDP_SEGMENT: 1200-byte datagrams
    time.sleep(0.3)
    for batch in range(int(sys.argv[2]) // 8):
        chunks = [struct.pack("<I", batch * 8 + k).ljust(1200, bytes([k])) for k in range(8)]
        s.sendto(b"".join(chunks), (sys.argv[1], 9997))
        time.sleep(0.002)
""")
_SEQ_SINK = textwrap.dedent("""
    import json, socket, struct, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((sys.argv[1], 9997)); s.settimeout(2)
    out = []
    try:
        while True:
            data = s.recv(65536)
            out.append([struct.unpack_from("<I", data)[0], len(data)])
    except TimeoutError:
        pass
    print(json.dumps(out))
""")


def _tun_run(spec: LinkSpec, offload: str, source: str, sink: str, *args: str) -> tuple:
    """Run ``source`` in A and ``sink`` in B (both given B's address and ``args``) through a
    TUN link with the native forwarder; returns what the sink printed and the link."""
    with TunLink(spec, forwarder="native", offload=offload) as link:
        out = subprocess.Popen(
            netns_exec(link.ns_b, sys.executable, "-c", sink, link.addr_b, *args),
            stdout=subprocess.PIPE,
            text=True,
        )
        subprocess.run(
            netns_exec(link.ns_a, sys.executable, "-c", source, link.addr_b, *args),
            check=True,
            timeout=120,
        )
        printed = out.communicate(timeout=120)[0]
    return printed, link


@needs_root
@needs_native
def test_tun_offload_delivers_the_same_packets_as_without():
    """UDP GSO sends (the kernel hands the forwarder 8-datagram super-packets when offloads
    are on, and segments them itself when off): the same datagrams are lost, duplicated and
    corrupted (then dropped by the receiver's checksum), the link model's own decisions."""
    import json

    spec = LinkSpec(rate="200Mbit/s", rtt="10ms", loss=0.05, duplicate=0.05, corrupt=0.05, seed=5)
    n = 400
    runs = {}
    for offload in ("on", "off"):
        printed, link = _tun_run(spec, offload, _GSO_SOURCE, _SEQ_SINK, str(n))
        got = sorted(tuple(x) for x in json.loads(printed))
        runs[offload] = (got, link.summary)
        assert bool(link.offload) == (offload == "on")
    (on, s_on), (off, s_off) = runs["on"], runs["off"]
    assert on == off and len(on) > 0.8 * n
    assert s_on["native"]["a_to_b"]["gso_in"] > 0 and s_off["native"]["a_to_b"]["gso_in"] == 0
    for key in ("packets", "bytes", "delivered", "loss_drops", "duplicated", "corrupted"):
        assert s_on["a_to_b"][key] == s_off["a_to_b"][key], key
    # the link's first packets can be the kernel's own (an IPv6 report as the device comes
    # up, before IPv6 is turned off): they take the first decisions
    early = s_on["a_to_b"]["packets"] - n
    assert 0 <= early <= 4
    want = {k: {i - early for i in v} for k, v in _predicted(spec, n + early, 1228).items()}
    kept = [i for i in range(n) if i not in want["lost"] | want["bad"]]
    assert on == sorted((i, 1200) for i in kept for _ in range(1 + (i in want["dup"])))


_TCP_SOURCE = textwrap.dedent("""
    import random, socket, sys, time
    data = random.Random(int(sys.argv[2])).randbytes(16 << 20)
    time.sleep(0.3)
    s = socket.create_connection((sys.argv[1], 9996), timeout=60)
    s.sendall(data)
    s.close()
""")
_TCP_SINK = textwrap.dedent("""
    import hashlib, socket, sys
    srv = socket.create_server((sys.argv[1], 9996)); srv.settimeout(60)
    conn, _ = srv.accept()
    h, n = hashlib.sha256(), 0
    while chunk := conn.recv(1 << 20):
        h.update(chunk); n += len(chunk)
    print(n, h.hexdigest())
""")


@needs_root
@needs_native
def test_tun_offload_carries_tcp_whole_through_losses_and_corruption():
    """Kernel TCP with TSO: super-packets cut into wire packets, some lost, duplicated or
    corrupted (their checksum finished before the flip, so the receiver drops them), the
    rest merged back; the stream arrives whole."""
    import hashlib
    import random

    spec = LinkSpec(rate="1Gbit/s", rtt="4ms", loss=0.005, duplicate=0.005, corrupt=0.005, seed=9)
    printed, link = _tun_run(spec, "on", _TCP_SOURCE, _TCP_SINK, "42")
    want = hashlib.sha256(random.Random(42).randbytes(16 << 20)).hexdigest()
    assert printed.split() == [str(16 << 20), want]
    native = link.summary["native"]["a_to_b"]
    assert native["gso_in"] > 0 and native["gso_out"] > 0 and native["malformed"] == 0
    report = link.summary["report"]["a_to_b"]
    assert report["drops_random_loss"] > 0 and report["corrupted"] > 0


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


def test_offload_choice_follows_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv("SDR_TUN_OFFLOAD", raising=False)
    assert choose_offload(None, "native") and not choose_offload(None, "python")
    assert not choose_offload("off", "native") and choose_offload("on", "native")
    monkeypatch.setenv("SDR_TUN_OFFLOAD", "off")
    assert not choose_offload(None, "native") and choose_offload("auto", "native")
    with pytest.raises(ConfigError, match="native forwarder"):
        choose_offload("on", "python")
    with pytest.raises(ConfigError, match="fast"):
        choose_offload("fast", "native")


def test_the_python_forwarder_refuses_devices_with_offloads():
    class Offloaded:
        offload = 0x67

    spec = LinkSpec()
    with pytest.raises(ConfigError, match="offloads"):
        Forwarder([(Offloaded(), Offloaded())], spec, spec)  # type: ignore[list-item]


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
        ([(3, 3, 0, 0), (4, 0, 0, 0)], {}),  # unknown kind
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


# --- TUN offloads: virtio headers and GSO packets (kind 2 ports) -------------------------
# Socket pairs stand in for TUN devices opened with IFF_VNET_HDR (one datagram per read or
# write, the header in front). The reference is sdr.backends.wan.gso_reference: what a
# device does with a GSO packet (virtio spec; the kernel's TSO/USO), checksums from scratch.


def _vnet_loop(out_kind=0, max_packet=9000, coalesce=True, n=None, **cols):
    a_in, a_user = _pair()
    b_out, b_user = _pair()
    for s in (a_in, b_out):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    loop = _forward.Loop(
        [(a_in.fileno(), 2, 0, 0), (b_out.fileno(), out_kind, 0, 0)],
        (1e12, 1e12), (0.0, 0.0), (1e8, 1e8), [[], []], 28, max_packet, 256, 1e-3, coalesce,
    )  # fmt: skip
    n = n or _forward.LOW_WATER + 200
    loop.feed(0, *_columns(n, **cols))
    loop.feed(1, *_columns(n))
    return loop, (a_in, a_user, b_out, b_user)


_SHAPES = [(False, 6), (False, 17), (True, 6), (True, 17)]
_SHAPE_IDS = ["tcp4", "udp4", "tcp6", "udp6"]


@needs_native
@pytest.mark.parametrize("v6, proto", _SHAPES, ids=_SHAPE_IDS)
@pytest.mark.parametrize("out_kind", [0, 2], ids=["plain-out", "vnet-out"])
def test_gso_reads_are_cut_into_the_kernels_wire_packets(v6, proto, out_kind):
    payload = bytes(range(256)) * 23 + b"tail"  # 5892 bytes: 5 segments of 1000, one of 892
    opts = b"\x01\x01\x08\x0a" + bytes(8) if proto == 6 else b""  # NOP NOP timestamps
    frame = gso_frame(v6, proto, payload, 1000, options=opts, flags=0x19 if proto == 6 else 0)
    want = wire_packets(frame)
    assert len(want) == 6 and all(checksum_ok(p) for p in want)
    loop, (a_in, a_user, b_out, b_user) = _vnet_loop(out_kind)
    a_user.send(frame)
    loop.run(0.05)
    written = _drain(b_user)
    got = [p for f in written for p in wire_packets(f)] if out_kind == 2 else written
    assert got == want
    s = loop.stats(0)
    assert (s["packets"], s["forwarded"], s["gso_in"], s["bytes"]) == (6, 6, 1, sum(map(len, want)))
    if out_kind == 2:
        assert len(written) < 6 and s["gso_out"] >= 1  # merged back (all due at once here)
        if len(written) == 1:
            assert written[0] == frame  # the very packet the kernel handed over
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()


@needs_native
@pytest.mark.parametrize("v6, proto", _SHAPES, ids=_SHAPE_IDS)
def test_offload_decisions_are_per_wire_packet_and_runs_break_at_gaps(v6, proto):
    n = _forward.LOW_WATER + 200
    loss, bad, bit = np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    loss[[2, 9]] = 1  # the third segment of the first packet, the fourth of the second
    bad[4], bit[4] = 1, 3
    loop, (a_in, a_user, b_out, b_user) = _vnet_loop(2, loss=loss, corrupt=bad, bit=bit)
    body = [bytes([i]) * 3000 + b"x" * 450 for i in range(2)]
    frames = [
        gso_frame(v6, proto, body[i], 600, seq=1000 + 3450 * i, ident=7 + 6 * i) for i in range(2)
    ]
    want = [p for f in frames for p in wire_packets(f)]
    assert len(want) == 12
    for f in frames:
        a_user.send(f)
    loop.run(0.05)
    written = _drain(b_user)
    got = [p for f in written for p in wire_packets(f)]
    expect = [p for i, p in enumerate(want) if i not in (2, 9)]
    assert len(got) == len(expect) == 10
    for i, (g, w) in enumerate(zip(got, expect, strict=True)):
        if i == 3:  # want[4], corrupted: one bit flipped past the headers, checksum now wrong
            diff = [j for j in range(len(w)) if g[j] != w[j]]
            assert len(diff) == 1 and diff[0] >= 28 and not checksum_ok(g)
        else:
            assert g == w
    flags = [VNET.unpack_from(f)[0] for f in written]
    sizes = [len(wire_packets(f)) for f in written]
    assert sum(sizes) == 10 and max(sizes) > 1  # runs merged, none across a lost packet
    bad_frame = next(f for f in written if f[VNET.size :] == got[3])
    assert VNET.unpack_from(bad_frame)[:2] == (0, 0)  # written whole: the receiver checks it
    assert flags.count(NEEDS_CSUM) == len(written) - 1
    s = loop.stats(0)
    assert (s["packets"], s["loss_random"], s["corrupted"], s["forwarded"]) == (12, 2, 1, 10)
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()


@needs_native
def test_without_coalescing_every_wire_packet_is_its_own_write():
    loop, (a_in, a_user, b_out, b_user) = _vnet_loop(2, coalesce=False)
    frame = gso_frame(False, 17, b"u" * 4000, 1000)
    a_user.send(frame)
    loop.run(0.05)
    written = _drain(b_user)
    assert len(written) == 4 and all(VNET.unpack_from(f)[1] == 0 for f in written)
    assert [p for f in written for p in wire_packets(f)] == wire_packets(frame)
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()


def _mangled():
    good = gso_frame(False, 6, b"p" * 3000, 1000)
    hdr = VNET.size

    def at(frame, i, value):
        b = bytearray(frame)
        b[i] = value
        return bytes(b)

    single = VNET.pack(NEEDS_CSUM, 0, 0, 0, 20, 6) + ip_packet(False, 17, b"s" * 100)[0]
    return [
        ("short", b"\x01\x05\x00", "malformed"),
        ("header-only", good[:hdr], "malformed"),
        ("no-needs-csum", at(good, 0, 0), "malformed"),
        ("ufo", at(good, 1, 3), "malformed"),
        ("tcp-as-udp", at(good, 1, GSO_UDP_L4), "malformed"),
        ("ecn", at(good, 1, GSO_TCPV4 | 0x80), "malformed"),
        ("gso-size-0", good[:6] + b"\0\0" + good[8:], "malformed"),
        ("csum-start", good[:8] + struct.pack("=H", 24) + good[10:], "malformed"),
        ("truncated", good[:-1], "malformed"),
        ("ip-version", at(good, hdr, 0x55), "malformed"),
        ("ihl-4", at(good, hdr, 0x44), "malformed"),
        ("fragment", at(good, hdr + 6, 0x60), "malformed"),
        ("doff-4", at(good, hdr + 32, 0x40), "malformed"),
        ("doff-past-end", at(gso_frame(False, 6, b"ab", 1000), hdr + 32, 0xF0), "malformed"),
        ("no-payload", gso_frame(False, 6, b"", 1000), "malformed"),
        ("too-many-segments", gso_frame(False, 17, b"q" * 6500, 100), "oversize"),
        ("segment-over-mtu", gso_frame(False, 17, b"q" * 6000, 2000), "oversize"),
        ("single-over-mtu", VNET.pack(0, 0, 0, 0, 0, 0) + b"\x45" * 1600, "oversize"),
        ("single-csum-past-end", single[:8] + struct.pack("=H", 200) + single[10:], "malformed"),
        ("single-offset-past-end", single[:10] + b"\xff\xff", "malformed"),
    ]


@needs_native
@pytest.mark.parametrize(
    "frame, counter", [m[1:] for m in _mangled()], ids=[m[0] for m in _mangled()]
)
def test_bad_vnet_reads_use_one_decision_and_write_nothing(frame, counter):
    loop, (a_in, a_user, b_out, b_user) = _vnet_loop(0, max_packet=1500)
    left = loop.pending(0)
    a_user.send(frame)
    loop.run(0.05)
    assert _drain(b_user) == []
    s = loop.stats(0)
    assert s[counter] == 1 and s["packets"] == 1 and s["forwarded"] == 0
    assert loop.pending(0) == left - 1
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()


@needs_native
def test_a_partial_checksum_is_finished_for_a_port_without_offloads():
    pkt = ip_packet(False, 17, b"z" * 333)[0]
    frame = VNET.pack(NEEDS_CSUM, 0, 0, 0, 20, 6) + pkt
    loop, (a_in, a_user, b_out, b_user) = _vnet_loop(0)
    a_user.send(frame)
    a_user.send(VNET.pack(0, 0, 0, 0, 0, 0) + b"raw")  # no checksum to finish: as it is
    loop.run(0.05)
    got = _drain(b_user)
    assert got == [finish_checksum(pkt, 20, 6), b"raw"] and checksum_ok(got[0])
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()


@needs_native
def test_vnet_ports_read_only_with_a_packets_worth_of_decisions():
    loop, (a_in, a_user, b_out, b_user) = _vnet_loop(0, n=_forward.MAX_SEGS - 1)
    a_user.send(VNET.pack(0, 0, 0, 0, 0, 0) + b"wait")
    assert loop.run(0.05, 0, 0) == 1  # back at once: direction 0 needs MAX_SEGS decisions
    assert _drain(b_user) == [] and loop.stats(0)["packets"] == 0
    loop.feed(0, *_columns(1))
    loop.run(0.05, 0, 0)
    assert _drain(b_user) == [b"wait"]
    for sock in (a_in, a_user, b_out, b_user):
        sock.close()
