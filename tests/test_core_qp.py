"""End-to-end behaviour of the SDR QP over the in-process wire."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sdr_pairs import make_pair, random_bytes

import sdr
from sdr.control import CTS
from sdr.transport import CompletionBatch


def transfer(pair, nbytes, imm=None, recv_len=None):
    src, dst = random_bytes(nbytes, seed=nbytes), np.zeros(nbytes, dtype=np.uint8)
    rh = pair.qb.post_recv(pair.b.register(dst), length=recv_len)
    sh = pair.qa.post_send(pair.a.register(src), imm=imm)
    return src, dst, rh, sh


def test_one_shot_lossless_bytes_imm_and_counters():
    pair = make_pair()
    src, dst, rh, sh = transfer(pair, 100_000, imm=0xDEADBEEF)
    assert rh.imm is None and not rh.bitmap.any()
    pair.pump(5)
    assert sh.poll() and rh.poll()
    assert np.array_equal(src, dst)
    assert rh.imm == 0xDEADBEEF
    assert rh.bitmap.all() and len(rh.bitmap) == 25
    counters = pair.qb.counters()
    assert counters["packets_accepted"] == 98
    assert counters["duplicates"] == counters["late"] == counters["malformed"] == 0
    assert pair.qa.counters()["messages_sent"] == 1


@pytest.mark.parametrize("nbytes", [0, 1, 1024, 3000])
def test_short_messages_carry_the_immediate_in_imm_only_packets(nbytes):
    pair = make_pair()
    src, dst, rh, sh = transfer(pair, nbytes, imm=0x12345678)
    pair.pump(5)
    assert rh.poll() and rh.imm == 0x12345678
    assert np.array_equal(src, dst)
    n_packets = -(-nbytes // 1024)
    assert pair.qb.counters()["imm_only_packets"] == max(0, 8 - n_packets)


def test_packets_round_robin_over_channels_on_the_cts_generation():
    attr = sdr.QPAttr(mtu=1024, chunk_size=1024, max_message_size=65536, channels=3)
    core = sdr.QueuePairCore(attr)
    mr = sdr.MemoryRegion(key=1, view=memoryview(bytearray(10 * 1024)))
    core.post_send(0.0, mr)
    assert core.writes_to_send(0.0, 100) == []  # no CTS yet: nothing goes out
    core.receive_control(0.0, CTS(seq=0, msg_id=0, slot=5, generation=2, length=10 * 1024).encode())
    batches = core.writes_to_send(0.0, 4)
    assert [b.channels.tolist() for b in batches] == [[0, 1, 2, 0]]
    assert batches[0].generation == 2
    assert batches[0].remote_offsets.tolist() == [5 * 65536 + i * 1024 for i in range(4)]
    rest = core.writes_to_send(0.0, 100)
    assert [b.channels.tolist() for b in rest] == [[1, 2, 0, 1, 2, 0]]


def test_loss_leaves_holes_that_a_stream_repairs():
    pair = make_pair(drop=0.05, seed=7)
    src, dst = random_bytes(200_000, 1), np.zeros(200_000, dtype=np.uint8)
    ms = pair.a.register(src)
    rh = pair.qb.post_recv(pair.b.register(dst))
    st = pair.qa.send_stream(imm=42)
    st.send(ms, 0, 0, len(src))
    pair.pump(5)
    missing = rh.missing_chunks()
    assert 0 < len(missing) < len(rh.bitmap)
    for _ in range(10):  # selective repeat by hand: resend exactly the missing chunks
        for start, stop in rh.chunk_ranges(rh.missing_chunks()):
            st.send(ms, int(start), int(start), int(stop - start))
        pair.pump(3)
        if rh.bitmap.all():
            break
    st.end()
    pair.pump(3)
    assert rh.poll() and np.array_equal(src, dst) and rh.imm == 42
    assert st.poll()


def test_duplicates_and_reordering_are_harmless():
    pair = make_pair(duplicate=0.3, reorder=0.3, seed=3)
    src, dst, rh, _ = transfer(pair, 300_000, imm=7)
    pair.pump(10)
    assert rh.poll() and np.array_equal(src, dst) and rh.imm == 7
    counters = pair.qb.counters()
    assert counters["duplicates"] > 0
    assert counters["packets_accepted"] == -(-300_000 // 1024)


def test_late_packets_after_early_completion_are_never_written():
    pair = make_pair(delay=0.01)
    src, dst, rh, sh = transfer(pair, 50_000)
    for _ in range(3):  # CTS crosses, packets go out, nothing lands yet
        pair.a.progress()
        pair.b.progress()
        pair.clock.advance(0.006)
    assert sh.poll()
    rh.complete()  # early completion: the slot now points at NULL
    assert rh.released and not hasattr(rh, "completed")  # one name: released
    pair.pump(20, step=0.005)
    assert not dst.any()
    assert pair.qb.counters()["late"] == -(-50_000 // 1024)


def test_id_wraparound_stragglers_hit_a_stale_generation():
    attr = sdr.QPAttr(
        mtu=1024,
        chunk_size=1024,
        max_message_size=16384,
        max_messages=4,
        id_bits=2,
        offset_bits=26,
        user_imm_bits=4,
        generations=2,
    )
    pair = make_pair(attr)
    captured = []
    send = pair.net.send
    pair.net.send = lambda dst, item, control=False: (
        captured.append((dst, item)),
        send(dst, item, control),
    )[1]  # noqa: E501
    first = transfer(pair, 4096)
    pair.pump(3)
    assert first[2].poll()
    first[2].complete()
    straggler = next(item for _, item in captured if not isinstance(item, bytes))
    for _ in range(3):  # ids 1..3
        _, _, rh, _ = transfer(pair, 4096)
        pair.pump(3)
        assert rh.poll()
        rh.complete()
    src, dst, rh, _ = transfer(pair, 4096)  # id 0 again, slot 0 again, next generation
    assert rh.record.msg_id == 0 and rh.record.slot == 0 and rh.record.generation == 1
    gen, ch, roff, imm, payload = straggler
    pair.net.send(pair.qb.transport_qp.eid, (gen, ch, roff, imm, b"\xff" * len(payload)))
    pair.pump(3)
    assert rh.poll() and np.array_equal(src, dst)
    assert pair.qb.counters()["late"] == 1  # the old generation's key entry is NULL


def test_forged_completions_are_counted_never_marked():
    attr = sdr.QPAttr(mtu=1000, chunk_size=2000, max_message_size=10_000, generations=2)
    core = sdr.QueuePairCore(attr)
    mr = sdr.MemoryRegion(key=1, view=memoryview(bytearray(5000)))
    rec = core.post_recv(0.0, mr)
    enc = attr.layout.encode
    rows = [
        (0, 1, enc(0, 0, 0), 1000, -1),  # wrong generation
        (0, 0, enc(0, 9, 0), 1000, -1),  # offset past the message
        (0, 0, enc(0, 1, 0), 999, -1),  # wrong length
        (0, 0, enc(0, 4, 0), 1000, -1),  # last packet must be 1000? yes: 5000 = 5 x 1000
        (0, 0, enc(0, 2, 0), 1000, 7),  # remote offset disagrees with the immediate
        (0, 0, enc(3, 0, 0), 1000, -1),  # no such message
        (0, 0, enc(0, 9, 0), 0, -1),  # imm-only packet with an impossible fragment index
    ]
    core.receive_completions(0.0, CompletionBatch.from_rows(rows))
    c = core.counters
    assert (c.stale_generation, c.out_of_range, c.malformed, c.late) == (1, 1, 3, 1)
    assert c.packets_accepted == 1 and rec.bitmap.packets.tolist() == [0, 0, 0, 0, 1]


def test_receive_smaller_than_message_fails_the_send_clearly():
    pair = make_pair()
    src, dst = random_bytes(10_000), np.zeros(12_000, dtype=np.uint8)
    pair.qb.post_recv(pair.b.register(dst), length=5_000)
    sh = pair.qa.post_send(pair.a.register(src))
    with pytest.raises(sdr.ProtocolError, match="5000 bytes"):
        for _ in range(5):
            pair.pump(1)
            sh.poll()
    assert not dst.any()


def test_misuse_gets_clear_errors():
    pair = make_pair()
    buf = np.zeros(4096, dtype=np.uint8)
    mr = pair.b.register(buf)
    with pytest.raises(sdr.ConfigError, match="outside the registered region"):
        pair.qb.post_recv(mr, offset=4000, length=200)
    with pytest.raises(sdr.ConfigError, match="max_message_size"):
        pair.qb.post_recv(pair.b.register(np.zeros(2 << 20, dtype=np.uint8)))
    with pytest.raises(sdr.ConfigError, match="read-only"):
        pair.b.register(b"immutable")
    with pytest.raises(sdr.ConfigError, match="non-contiguous"):
        pair.b.register(np.zeros((8, 8), dtype=np.uint8)[:, ::2])
    with pytest.raises(sdr.ConfigError, match="multiple of the mtu"):
        pair.qa.send_stream().send(mr, 0, 100, 10)
    with pytest.raises(sdr.ConfigError, match="imm"):
        pair.qa.post_send(mr, imm=1 << 32)
    lonely = pair.a.create_qp(pair.qa.attr)
    with pytest.raises(sdr.ConfigError, match="connect"):
        lonely.post_recv(mr)
    other = sdr.Context("inproc", network=pair.net).create_qp(sdr.QPAttr(mtu=2048))
    with pytest.raises(sdr.ConfigError, match="mtu: ours 1024, peer 2048"):
        pair.qa.connect(other.info())
    with pytest.raises(sdr.ProtocolError):
        pair.qa.connect(b"not json")


def test_slots_are_bounded():
    attr = sdr.QPAttr(mtu=1024, chunk_size=1024, max_message_size=4096, max_messages=2)
    pair = make_pair(attr)
    mr = pair.b.register(np.zeros(4096, dtype=np.uint8))
    first = pair.qb.post_recv(mr, length=1024)
    pair.qb.post_recv(mr, offset=1024, length=1024)
    with pytest.raises(sdr.ResourceBusy, match="slots"):
        pair.qb.post_recv(mr, offset=2048, length=1024)
    first.complete()
    pair.qb.post_recv(mr, offset=2048, length=1024)


def test_malformed_control_messages_are_counted():
    pair = make_pair()
    core = pair.qa.core
    for junk in (b"", b"\x01short", b"\x05" + bytes(23), CTS(0, 3, 0, 0, 100).encode()):
        core.receive_control(0.0, junk)
    assert core.counters.control_malformed == 4
    core.receive_control(0.0, b"\x20reliability")
    assert pair.qa.poll_control() == [b"\x20reliability"]


def test_rate_limit_paces_the_sender():
    attr = sdr.QPAttr(mtu=1024, chunk_size=4096, max_message_size="1MiB", rate_limit="8Mbit/s")
    pair = make_pair(attr)
    transfer(pair, 500_000)
    pair.a.progress()
    pair.b.progress()
    pair.a.progress()
    burst = pair.qa.counters()["packets_sent"]
    assert 0 < burst <= 16  # one burst (16 packets) at t=0
    pair.pump(100, step=0.001)  # 0.1 s at 1 MB/s: about 100 KB more
    sent = pair.qa.counters()["bytes_sent"]
    assert 90_000 < sent - burst * 1024 < 115_000


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, 9000), st.booleans()), min_size=1, max_size=12),
    st.integers(0, 2**31),
)
def test_writes_stay_inside_posted_ranges(messages, seed):
    """Random sizes, early completions and a lossy, duplicating, reordering wire: bytes
    land only inside posted ranges, and every receive that reports arrival is exact."""
    attr = sdr.QPAttr(mtu=512, chunk_size=1024, max_message_size=16384, max_messages=16)
    pair = make_pair(attr, seed=seed % 1000, drop=0.05, duplicate=0.1, reorder=0.1)
    guard = 64
    for size, early in messages:
        src = random_bytes(size, seed=size)
        dst = np.zeros(size + 2 * guard, dtype=np.uint8)
        rh = pair.qb.post_recv(pair.b.register(dst), offset=guard, length=size)
        pair.qa.post_send(pair.a.register(src), imm=size)
        if early:
            rh.complete()
        pair.pump(4)
        assert not dst[:guard].any() and not dst[guard + size :].any()
        if rh.record.arrived:
            assert np.array_equal(dst[guard : guard + size], src) and rh.imm == size
        rh.complete()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 12),
            st.integers(0, 2),
            st.sampled_from([0, 1, 500, 999, 1000]),
            st.booleans(),
        ),
        min_size=1,
        max_size=120,
    )
)
def test_row_vectorized_and_native_paths_agree(rows):
    """The receive table's three arrival paths (row by row, vectorized, native) apply the
    same rules to the same (partly forged, duplicated) completions: same counters,
    bitmaps, immediates and completed-chunk events."""
    from sdr import placement, recv_table

    attr = sdr.QPAttr(mtu=1000, chunk_size=2000, max_message_size=10_000, generations=3)
    modes = [("python", 10_000), ("python", 0)]
    if placement.mark_arrivals_native is not None:
        modes.append(("native", 0))
    results = []
    for datapath, small in modes:
        recv_table.SMALL_BATCH, saved = small, recv_table.SMALL_BATCH
        previous = placement.use_datapath(datapath)
        try:
            core = sdr.QueuePairCore(attr)
            mr = sdr.MemoryRegion(key=1, view=memoryview(bytearray(20_000)))
            recs = [core.post_recv(0.0, mr, 0, 9_500), core.post_recv(0.0, mr, 10_000, 3_000)]
            enc = attr.layout.encode
            batch = [
                (
                    0,
                    gen,
                    enc(msg, pkt, pkt % 16),
                    length,
                    (recs[msg].slot * 10_000 + pkt * 1000) if (msg < 2 and honest) else -1,
                )
                for msg, pkt, gen, length, honest in rows
            ]
            events = []
            for part in (batch[: len(batch) // 2], batch[len(batch) // 2 :]):
                done = core.receive_completions(0.0, CompletionBatch.from_rows(part))
                events.append(sorted((recs.index(r), c.tolist()) for r, c in done.items()))
            results.append(
                (
                    core.counters.as_dict(),
                    [r.bitmap.packets.tolist() for r in recs],
                    [r.bitmap.chunks.tolist() for r in recs],
                    [r.imm for r in recs],
                    events,
                )
            )
        finally:
            recv_table.SMALL_BATCH = saved
            placement.use_datapath(previous)
    assert all(r == results[0] for r in results[1:])


def test_authenticated_setup_refuses_forged_or_unsigned_info():
    import json

    from sdr.backends.inproc import InprocNetwork

    net = InprocNetwork()
    secret = "a shared secret of the job"
    a, b = (
        sdr.Context("inproc", network=net, secret=secret),
        sdr.Context("inproc", network=net, secret=secret),
    )
    qa, qb = a.create_qp(), b.create_qp()
    info = qb.info()
    forged = json.loads(info)
    forged["transport"]["endpoint"] += 1
    with pytest.raises(sdr.ProtocolError, match="failed authentication"):
        qa.connect(json.dumps(forged).encode())
    outsider = sdr.Context("inproc", network=net).create_qp()
    with pytest.raises(sdr.ProtocolError, match="not authenticated"):
        qa.connect(outsider.info())
    wrong = sdr.Context("inproc", network=net, secret="another secret, 16+ bytes").create_qp()
    with pytest.raises(sdr.ProtocolError, match="failed authentication"):
        qa.connect(wrong.info())
    qa.connect(info)
    qb.connect(qa.info())
    assert qa.connected and qb.connected
    with pytest.raises(sdr.ConfigError, match="16 bytes"):
        sdr.Context("inproc", network=net, secret="short")
