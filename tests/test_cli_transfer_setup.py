"""The set-up of ``sdr send`` / ``sdr recv`` against hostile peers and hostile neighbours.

The real commands run in subprocesses; the other side is either the real command or a
fake peer from ``oob_fakes`` that speaks the out-of-band wire by hand. Covers: nothing
planted at OUT.partial is followed or clobbered (nor at the relay map's temporary); the
announced size is signed and bounded (``--max-size``, free disk space); a recorded set-up
or reply replayed on another connection is refused; one deadline bounds the whole
set-up on both sides (a trickling or silent peer); a full disk is a one-line error.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from oob_fakes import Listener, OobProxy, dial, frame, hello, read_frame, read_frames

SDR = str(Path(sys.executable).with_name("sdr"))
ROOT = Path(__file__).resolve().parents[1]
SECRET = "a shared secret, 32 bytes long.."
RUN_S = 60  # bound on one command's run here; each finishes within a few seconds


def _env(secret: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SDR_SECRET"}
    if secret is not None:
        env["SDR_SECRET"] = secret
    return env


def _recv(out: Path, *args: str, secret: str | None = None) -> subprocess.Popen:
    """``sdr recv --json`` on a free loopback port (read its port with :func:`_port`)."""
    return subprocess.Popen(
        [SDR, "recv", "--out", str(out), "--bind", "127.0.0.1", "--port", "0", "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(secret),
    )  # fmt: skip


def _port(receiver: subprocess.Popen) -> int | None:
    """The port the receiver listens on; None when it exited without listening."""
    assert receiver.stdout is not None
    line = receiver.stdout.readline()
    return json.loads(line)["listening"] if line else None


def _send(source: Path, port: int, *args: str, secret: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [SDR, "send", str(source), "--to", f"127.0.0.1:{port}", "--scheme", "sr-rto",
         "--rtt", "5ms", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(secret),
    )  # fmt: skip


def _error(proc: subprocess.Popen) -> str:
    """The one ``error:`` line a failed command ends with (status 2, no traceback)."""
    _, stderr = proc.communicate(timeout=RUN_S)
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), stderr
    return last


def _payload(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


# --- 1. nothing planted at OUT.partial is followed or clobbered -----------------------


@pytest.mark.parametrize("planted", ["link to the user's file", "kept partial file"])
def test_nothing_at_out_partial_is_followed_or_clobbered(tmp_path: Path, planted: str) -> None:
    victim = tmp_path / "secrets.txt"
    victim.write_bytes(b"the receiving user's own data\n")
    victim.chmod(0o600)
    out = tmp_path / "out.bin"
    partial = tmp_path / "out.bin.partial"
    if planted.startswith("link"):
        partial.symlink_to(victim)
    else:
        partial.write_bytes(b"kept with --keep-partial\n")
    before = {p: p.read_bytes() for p in (victim, partial)}
    receiver = _recv(out, "--timeout", "30")
    port = _port(receiver)
    if port is not None:  # it listens: a whole transfer shows what it does to the file
        sender = _send(_payload(tmp_path / "in.bin", 64 << 10), port, "--timeout", "30")
        sender.communicate(timeout=RUN_S)
    last = _error(receiver)
    assert {p: p.read_bytes() for p in (victim, partial)} == before
    assert partial.is_symlink() == planted.startswith("link")
    assert "out.bin.partial already exists" in last and "--out" in last, last
    assert not out.exists()


def test_a_link_planted_after_the_check_is_not_followed(tmp_path: Path) -> None:
    """The race: OUT.partial appears between the early check and the creation."""
    from sdr.cli.transfer_output import check_out, create_partial

    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    out = str(tmp_path / "out.bin")
    check_out(out)
    Path(out + ".partial").symlink_to(victim)
    with pytest.raises(FileExistsError, match="already exists"):
        create_partial(out, 4096)
    assert victim.read_bytes() == b"keep me"
    with create_partial(str(tmp_path / "other.bin"), 4096) as created:
        st = os.fstat(created.fileno())
    assert (st.st_mode & 0o777, st.st_size) == (0o600, 4096)


def test_only_the_file_received_into_is_published(tmp_path: Path) -> None:
    """The verified partial becomes OUT with a new file's mode; a partial that someone
    replaced meanwhile (a directory without the sticky bit) is never renamed."""
    from sdr.cli.transfer_output import create_partial, publish

    out = str(tmp_path / "out.bin")
    old_umask = os.umask(0o027)
    try:
        with create_partial(out, 10) as fh:
            publish(fh, out)
    finally:
        os.umask(old_umask)
    assert os.stat(out).st_mode & 0o777 == 0o640
    other = str(tmp_path / "other.bin")
    with create_partial(other, 10) as fh:
        os.remove(other + ".partial")
        Path(other + ".partial").write_bytes(b"someone else's")
        with pytest.raises(OSError, match="was replaced during the transfer"):
            publish(fh, other)
    assert not os.path.exists(other)


def test_the_relay_map_never_follows_a_planted_link(tmp_path: Path) -> None:
    from sdr.cli.transfer_relay import load_side, write_map

    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    path = tmp_path / "relay.json"
    (tmp_path / "relay.json.tmp").symlink_to(victim)  # the name the map was written via
    a = [("127.0.0.1", 4000), ("127.0.0.1", 4001)]
    b = [("127.0.0.1", 5000), ("127.0.0.1", 5001)]
    write_map(str(path), a, b, b, a)
    path2 = tmp_path / "linked.json"
    path2.symlink_to(victim)  # a link at the map's own name is replaced, not followed
    write_map(str(path2), a, b, b, a)
    assert victim.read_bytes() == b"keep me"
    assert not path2.is_symlink()
    for p in (path, path2):
        assert load_side(str(p), "b", 1.0).data == ("127.0.0.1", 5000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "linked.json", "relay.json", "relay.json.tmp", "victim"
    ]  # fmt: skip


# --- 2. the announced size is signed and bounded --------------------------------------


def _hostile_sender(port: int, make: Any) -> list[Any]:
    """Connect, read the receiver's challenge, send ``make(challenge)``; what came back."""
    with dial(port) as sock:
        challenge = read_frame(sock)["challenge"]
        sock.sendall(frame(make(challenge)))
        return read_frames(sock)


@pytest.mark.parametrize(
    ("size", "needle"),
    [
        (1 << 40, "the sender announces 1024GiB (1099511627776 bytes), more than this "
                  "receiver's --max-size 64GiB"),
        (1 << 63, "hello.size must be an integer in [0, 9223372036854775807], got int 9223"),
        (1 << 64, "hello.size must be an integer in [0, 9223372036854775807], got int 1844"),
        (-1, "hello.size must be an integer in [0, 9223372036854775807], got int -1"),
        ("5", "hello.size must be an integer"),
        (5.0, "hello.size must be an integer"),
    ],
)  # fmt: skip
def test_an_announced_size_beyond_the_limit_is_refused_before_anything_is_created(
    tmp_path: Path, size: Any, needle: str
) -> None:
    out = tmp_path / "out.bin"
    receiver = _recv(out, "--timeout", "30")
    port = _port(receiver)
    assert port is not None
    answers = _hostile_sender(port, lambda challenge: hello(challenge, size))
    last = _error(receiver)
    assert needle in last, last
    assert [a.keys() for a in answers] == [{"error"}] and needle in answers[0]["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no OUT, no OUT.partial


def test_max_size_bounds_a_real_transfer_and_is_checked_first(tmp_path: Path) -> None:
    source = _payload(tmp_path / "in.bin", 2 << 20)
    out = tmp_path / "out.bin"
    receiver = _recv(out, "--timeout", "30", "--max-size", "1MiB")
    port = _port(receiver)
    assert port is not None
    sender = _send(source, port, "--timeout", "30")
    refused = "the sender announces 2MiB (2097152 bytes), more than this receiver's --max-size 1MiB"
    assert refused in _error(receiver)
    assert f"receiver refused the transfer: {refused}" in _error(sender)
    assert not out.exists() and not (tmp_path / "out.bin.partial").exists()
    bad = _recv(out, "--max-size", "lots")
    assert _port(bad) is None
    assert "--max-size must be a size such as 64GiB, got 'lots'" in _error(bad)


def _alter_size(body: bytes) -> bytes:
    hello_ = json.loads(body)
    hello_["size"] *= 2
    return json.dumps(hello_).encode()


def test_the_signature_covers_the_announced_size(tmp_path: Path) -> None:
    """On the way, someone doubles the size in a signed hello: both sides refuse."""
    source = _payload(tmp_path / "in.bin", 256 << 10)
    out = tmp_path / "out.bin"
    receiver = _recv(out, "--timeout", "30", secret=SECRET)
    port = _port(receiver)
    assert port is not None
    proxy = OobProxy(port, edit=_alter_size)
    sender = _send(source, proxy.port, "--timeout", "30", secret=SECRET)
    altered = "or the set-up was altered on the way"
    assert "error: shared secret mismatch" in (last := _error(receiver)) and altered in last
    assert "error: shared secret mismatch" in _error(sender)
    proxy.join()
    assert not (tmp_path / "out.bin.partial").exists() and not out.exists()


def test_memory_is_independent_of_the_announced_size() -> None:
    """The pieces of a 1 TiB file are posted a window at a time, whatever the size."""
    from sdr.cli.transfer_pieces import PieceWindow

    class Handle:
        def __init__(self, length: int) -> None:
            self.length, self.finished, self.done, self.stats = length, False, False, {"n": 1}

    posted: list[Handle] = []

    def post(offset: int, length: int) -> Handle:
        posted.append(Handle(length))
        return posted[-1]

    size, message, depth = 1 << 40, 1 << 20, 32
    window = PieceWindow(post, size, message, depth)
    assert len(posted) == depth  # not 1 << 20 handles
    for _ in range(3):
        for h in posted[-depth:]:
            h.finished = h.done = True
        window.top_up()
        assert window.open == depth
    assert (len(posted), window.verified(), window.stats) == (4 * depth, 3 * depth << 20,
                                                              {"n": 3 * depth})  # fmt: skip
    assert not window.finished
    posted[-1].finished = True  # a failed message ends the posting
    window.top_up()
    assert window.finished and window.failed is posted[-1] and len(posted) == 4 * depth


# --- 3. a replayed set-up or reply is refused -----------------------------------------


def test_a_recorded_set_up_replayed_without_the_secret_is_refused(tmp_path: Path) -> None:
    source = _payload(tmp_path / "in.bin", 128 << 10)
    first = _recv(tmp_path / "first.bin", "--timeout", "30", secret=SECRET)
    port = _port(first)
    assert port is not None
    proxy = OobProxy(port)
    sender = _send(source, proxy.port, "--timeout", "30", secret=SECRET)
    assert sender.wait(RUN_S) == 0 and first.wait(RUN_S) == 0, sender.communicate()
    proxy.join()
    recorded = proxy.to_receiver[0]  # the signed hello, as an eavesdropper saw it
    assert b'"hmac"' in recorded and b'"challenge"' in recorded

    out = tmp_path / "second.bin"
    second = _recv(out, "--timeout", "30", secret=SECRET)
    port = _port(second)
    assert port is not None
    with dial(port) as sock:  # the replayer has no secret: it sends what it recorded
        sock.sendall(len(recorded).to_bytes(4, "big") + recorded)
        answers = read_frames(sock)
    last = _error(second)
    assert "the sender's hello answers another challenge (a replayed or stale set-up)" in last
    assert [sorted(a) for a in answers] == [["challenge"], ["error"]]  # no QP info given out
    assert not out.exists() and not (tmp_path / "second.bin.partial").exists()


def test_a_recorded_reply_replayed_to_another_sender_is_refused(tmp_path: Path) -> None:
    source = _payload(tmp_path / "in.bin", 128 << 10)
    first = _recv(tmp_path / "first.bin", "--timeout", "30", secret=SECRET)
    port = _port(first)
    assert port is not None
    proxy = OobProxy(port)
    sender = _send(source, proxy.port, "--timeout", "30", secret=SECRET)
    assert sender.wait(RUN_S) == 0 and first.wait(RUN_S) == 0, sender.communicate()
    proxy.join()
    challenge, recorded = (json.loads(b) for b in proxy.to_sender[:2])

    fake = Listener()  # stands in for the receiver: a fresh challenge, then the old reply
    sender = _send(source, fake.port, "--timeout", "30", secret=SECRET)
    with fake.accept() as conn:
        conn.sendall(frame(challenge))
        read_frame(conn)  # the sender's hello
        conn.sendall(frame(recorded))
        last = _error(sender)
    fake.close()
    assert "the receiver's reply answers another challenge (a replayed or stale reply)" in last


# --- 4. one deadline for the whole set-up ---------------------------------------------


def _trickle(sock: socket.socket, data: bytes, stop: threading.Event) -> None:
    """One byte of ``data`` every 0.2 s until ``stop`` or the data ends."""
    for i in range(len(data)):
        if stop.wait(0.2):
            return
        try:
            sock.sendall(data[i : i + 1])
        except OSError:
            return


def test_a_trickling_sender_cannot_hold_the_receiver_past_its_timeout(tmp_path: Path) -> None:
    receiver = _recv(tmp_path / "out.bin", "--timeout", "2")
    port = _port(receiver)
    assert port is not None
    stop = threading.Event()
    with dial(port) as sock:
        # a whole hello would do, a byte at a time: 0.2 s per byte is ~2 min for this one
        trickler = threading.Thread(
            target=_trickle, args=(sock, frame(hello("0" * 32)), stop), daemon=True
        )
        trickler.start()
        try:
            last = _error(receiver)  # within RUN_S; without a deadline it waits for them all
        finally:
            stop.set()
            trickler.join()
    assert "no complete set-up from the sender within 2 s" in last, last
    assert "bytes)" in last  # says how far the sender got


@pytest.mark.parametrize("behaviour", ["silent", "reads the hello, never answers", "trickles"])
def test_a_receiver_that_stops_answering_cannot_hold_the_sender(
    tmp_path: Path, behaviour: str
) -> None:
    source = _payload(tmp_path / "in.bin", 64 << 10)
    fake = Listener()
    sender = _send(source, fake.port, "--timeout", "2")
    stop = threading.Event()
    with fake.accept() as conn:
        trickler = None
        if behaviour != "silent":
            conn.sendall(frame({"challenge": "0" * 32}))
            read_frame(conn)
        if behaviour == "trickles":
            reply = frame({"qp": "{}", "challenge": None})
            trickler = threading.Thread(target=_trickle, args=(conn, reply, stop), daemon=True)
            trickler.start()
        try:
            last = _error(sender)
        finally:
            stop.set()
            if trickler is not None:
                trickler.join()
    fake.close()
    assert "no answer from the receiver within 2 s" in last, last


# --- 5. a full disk is a one-line error -----------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 4 MiB tmpfs (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.parametrize("keep", [False, True])
def test_a_file_larger_than_the_free_space_is_refused_in_one_line(
    tmp_path: Path, small_disk: Path, keep: bool
) -> None:
    source = _payload(tmp_path / "in.bin", 8 << 20)
    out = small_disk / "out.bin"
    receiver = _recv(out, "--timeout", "30", *(["--keep-partial"] if keep else []))
    port = _port(receiver)
    assert port is not None
    sender = _send(source, port, "--timeout", "30")
    last = _error(receiver)  # not SIGBUS halfway through
    assert "not enough space for" in last and "the sender announces 8MiB" in last, last
    assert "receiver refused the transfer: not enough space" in _error(sender)
    assert list(small_disk.iterdir()) == []  # nothing was created, so nothing is kept


def test_a_disk_that_fills_before_the_reservation_is_a_one_line_error(small_disk: Path) -> None:
    """The free-space check passed, then the disk filled: posix_fallocate says ENOSPC."""
    from sdr.cli.transfer_output import check_space, create_partial

    out = str(small_disk / "out.bin")
    check_space(out, 2 << 20)
    (small_disk / "filler").write_bytes(bytes(3 << 20))
    with pytest.raises(OSError, match=r"not enough space for .*out.bin: cannot reserve 2MiB"):
        create_partial(out, 2 << 20)
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no partial left
