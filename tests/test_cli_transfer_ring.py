"""The receiver's ring (sdr.cli.transfer_ring): pieces land in reused slots, are hashed
in file order and written; a slot is posted again only once written; the receiver falls
back to the file's mapping where two messages do not fit the ring, and to hashing the
whole file where the hello names no digest."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import blake3
import pytest

import sdr
from sdr.cli import transfer_receive, transfer_ring, transfer_send
from sdr.cli.transfer_options import TransferOptions
from sdr.cli.transfer_pieces import PieceWindow
from sdr.cli.transfer_ring import RING_MAX, RING_SPAN, SLACK_RTTS, ReceiveRing, ring_slots
from sdr.cli.transfer_setup import hello, parse_hello
from sdr.errors import RemoteProtocolError

MiB = 1 << 20


class _Handle:
    """A posted receive the test finishes by hand; it records where it was posted."""

    def __init__(self, slot: int, length: int) -> None:
        self.slot, self.length = slot, length
        self.finished = self.done = False

    def complete(self, ok: bool = True) -> None:
        self.finished, self.done = True, ok


def _wait(ring: ReceiveRing, written: int) -> None:
    deadline = time.monotonic() + 10
    while ring.written_bytes < written:
        assert time.monotonic() < deadline, "the writer did not write"
        time.sleep(0.001)


def test_slots_hold_the_round_trips_at_the_rate_within_the_window_and_the_cap() -> None:
    rtt, message = 0.025, 1 * MiB
    want = -(-(1e9 / 8 * rtt * SLACK_RTTS) // message) + 2  # 12.5 MB of data + two pieces
    assert ring_slots(1 << 30, message, 32, 1e9, rtt) == want == 14
    assert ring_slots(1 << 30, message, 8, 1e9, rtt) == 14  # more than the window: in order
    assert ring_slots(1 << 30, message, 32, None, rtt) == 32  # no rate: the whole window
    assert ring_slots(1 << 40, 64 * MiB, 32, 100e9, 0.1) == RING_MAX // (64 * MiB)
    assert ring_slots(1 << 40, RING_MAX // 2 + 1, 32, 1e9, rtt) == 0  # the mapping instead
    assert ring_slots(0, message, 32, 1e9, rtt) == 0


def test_a_file_shorter_than_a_few_rings_goes_to_its_mapping() -> None:
    """The ring's fresh pages cost once what it saves per byte of the file."""
    rtt, message = 0.025, 16 * MiB  # 3 slots: 48 MiB
    assert ring_slots(RING_SPAN * 48 * MiB, message, 32, 1e9, rtt) == 3
    assert ring_slots(RING_SPAN * 48 * MiB - 1, message, 32, 1e9, rtt) == 0
    assert ring_slots(256 * MiB, 64 * MiB, 32, 1e9, rtt) == 0  # 3 x 64 MiB: no
    assert ring_slots(1 * MiB, 4096, 32, None, rtt) == 32  # the whole window: 128 KiB


def test_pieces_are_written_and_hashed_in_file_order_and_a_slot_waits_for_its_write(
    tmp_path: Path,
) -> None:
    data = os.urandom(5 * 4096 + 100)
    pieces = [(off, min(4096, len(data) - off)) for off in range(0, len(data), 4096)]
    out = tmp_path / "out.bin"
    with out.open("wb+") as fh:
        ring = ReceiveRing(fh.fileno(), 4096, 2, blake3.blake3())
        fresh: list[tuple[int, int]] = []
        ring.fresh = lambda slot, n: fresh.append((slot, n))
        handles: list[_Handle] = []

        def post(index: int) -> _Handle:
            off, n = pieces[index]
            handle = ring.post(off, n, lambda slot, length: _Handle(slot, length))
            ring.buffer[handle.slot : handle.slot + n] = data[off : off + n]  # it "lands"
            handles.append(handle)
            return handle

        post(0), post(1)
        assert ring.room() == 0
        with pytest.raises(RuntimeError, match="no free slot"):
            ring.post(*pieces[2], lambda slot, length: _Handle(slot, length))
        handles[1].complete()  # the second finishes first: it keeps its slot
        ring.pump()
        assert ring.room() == 0 and ring.written_bytes == 0
        handles[0].complete()
        ring.pump()
        _wait(ring, 2 * 4096)
        assert ring.room() == 2
        for index in range(2, len(pieces)):
            handle = post(index)
            assert handle.slot == (index % 2) * 4096  # the slot written longest ago
            handle.complete()
            ring.pump()
            _wait(ring, sum(n for _, n in pieces[: index + 1]))
        assert fresh == [(0, 4096), (4096, 4096)]  # each slot populated once
        assert ring.finish() == blake3.blake3(data).hexdigest()
    assert out.read_bytes() == data


def test_a_failed_piece_stops_the_writer_and_salvage_keeps_the_completed_ones(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.bin"
    with out.open("wb+") as fh:
        fh.truncate(3 * 8)
        ring = ReceiveRing(fh.fileno(), 8, 3, None)
        handles = [ring.post(off, 8, lambda slot, n: _Handle(slot, n)) for off in (0, 8, 16)]
        for handle, byte in zip(handles, b"abc", strict=True):
            ring.buffer[handle.slot : handle.slot + 8] = bytes([byte]) * 8
        handles[0].complete(ok=False)
        handles[2].complete()
        ring.pump()
        assert ring.written_bytes == 0  # nothing behind a failed piece goes in order
        with pytest.raises(RuntimeError, match="have not finished"):
            ring.finish()
        ring.salvage()
        ring.close()
    assert out.read_bytes() == bytes(16) + b"c" * 8  # the one that completed, in place


def test_a_write_that_fails_fails_the_transfer_naming_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "read-only.bin"
    path.write_bytes(bytes(16))
    fd = os.open(path, os.O_RDONLY)
    try:
        ring = ReceiveRing(fd, 8, 2, None)
        handle = ring.post(8, 8, lambda slot, n: _Handle(slot, n))
        handle.complete()
        ring.pump()
        ring.close()
        with pytest.raises(OSError, match="writing the received file at offset 8"):
            ring.pump()
    finally:
        os.close(fd)


def test_the_window_posts_only_while_the_ring_has_room() -> None:
    posted: list[tuple[int, int]] = []
    room = [2]

    def post(off: int, n: int) -> _Handle:
        posted.append((off, n))
        return _Handle(0, n)

    window = PieceWindow(post, 10, 2, 8, room=lambda: room[0] - len(posted))
    assert posted == [(0, 2), (2, 2)]
    room[0] = 3
    window.top_up()
    assert posted == [(0, 2), (2, 2), (4, 2)]


def _transfer(tmp_path: Path, size: int, opts: TransferOptions) -> tuple[dict, dict, bytes]:
    """Send ``size`` random bytes to a receiver in a thread of this process: (sender's
    report, receiver's report, the bytes)."""
    data = os.urandom(size)
    source, out = tmp_path / "in.bin", tmp_path / "out.bin"
    source.write_bytes(data)
    ready: list[int] = []
    got: dict[str, Any] = {}

    def serve() -> None:
        try:
            got["report"] = transfer_receive.serve_file(
                str(out), "127.0.0.1", 0, ready=ready.append, timeout=30
            )
        except Exception as exc:  # handed to the test
            got["error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    while not ready and thread.is_alive():
        time.sleep(0.01)
    try:
        sent = transfer_send.send_file(str(source), "127.0.0.1", ready[0], opts)
    finally:
        thread.join(timeout=60)
    if "error" in got:
        raise got["error"]
    assert out.read_bytes() == data
    return sent, got["report"], data


_OPTS = TransferOptions(scheme="sr-nack", rate="200Mbit/s", rtt="5ms", message_size="64KiB",
                        mtu=4096, timeout=30)  # fmt: skip


def test_a_file_arrives_through_the_ring_with_its_digest_hashed_on_the_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole: list[int] = []
    monkeypatch.setattr(
        transfer_receive, "file_digest", lambda *a: whole.append(1) or "never asked"
    )
    sent, received, data = _transfer(tmp_path, 6 * MiB + 12345, _OPTS)
    # 4 round trips at 200 Mbit/s (0.5 MB, 8 pieces) + 2: 97 pieces through 10 slots
    assert received["ring_slots"] == 10
    assert received["digest"] == sent["digest"] == blake3.blake3(data).hexdigest()
    assert not whole  # no second pass over the file


def test_a_hello_without_a_digest_is_answered_by_hashing_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sender of an earlier version names no digest in its hello."""
    plain = transfer_send.hello
    monkeypatch.setattr(transfer_send, "hello", lambda *a, digest=None, **k: plain(*a, **k))
    sent, received, data = _transfer(tmp_path, 6 * MiB + 1, _OPTS)
    assert received["ring_slots"] > 0
    assert received["digest"] == sent["digest"] == blake3.blake3(data).hexdigest()


def test_messages_too_large_for_the_ring_land_in_the_files_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer_ring, "RING_MAX", 64 << 10)  # two 64 KiB pieces: no
    _, received, _ = _transfer(tmp_path, 6 * MiB + 7, _OPTS)
    assert received["ring_slots"] == 0


def test_a_sender_that_closes_with_another_digest_than_it_announced_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = transfer_send.hello
    monkeypatch.setattr(
        transfer_send, "hello", lambda *a, digest=None, **k: plain(*a, digest="sha256", **k)
    )
    with pytest.raises(Exception) as caught:
        _transfer(tmp_path, 6 * MiB, _OPTS)
    assert "announced sha256" in str(caught.value)
    assert isinstance(caught.value, RemoteProtocolError) or "receiver" in str(caught.value)
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize("digest", ["md5", "", 3, ["blake3"], {"a": 1}])
def test_a_hello_naming_an_unknown_digest_is_refused_naming_the_field(digest) -> None:
    attr = sdr.QPAttr(max_message_size=MiB)
    body = hello("f", MiB, attr, {"scheme": "sr-nack"}, "{}", "0" * 32, None, digest="sha256")
    assert parse_hello(body, "0" * 32, None, 1 << 40).digest == "sha256"
    body["digest"] = digest
    with pytest.raises(RemoteProtocolError, match="hello.digest must be one of"):
        parse_hello(body, "0" * 32, None, 1 << 40)
