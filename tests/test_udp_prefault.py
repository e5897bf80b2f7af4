"""Registering a buffer faults its pages in once (so the first packets to land do not
page-fault) and never changes a byte: through madvise(MADV_POPULATE_WRITE) where the
kernel has it, else by touching every page."""

from __future__ import annotations

import mmap
import resource

import numpy as np
import pytest

from sdr.backends.udp import sockets
from sdr.backends.udp.sockets import prefault

SIZE = (8 << 20) + 123  # not a whole number of pages
PAGES = (SIZE + mmap.PAGESIZE - 1) // mmap.PAGESIZE


def _faults_writing_every_page(view: memoryview) -> int:
    """Minor page faults this process takes to write one byte of every page of ``view``."""
    arr = np.frombuffer(view, dtype=np.uint8)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.add(arr[:: mmap.PAGESIZE], 0, out=arr[:: mmap.PAGESIZE])
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.parametrize("how", ["madvise", "touch", "none"])
def test_prefault_maps_every_page_of_a_file_and_changes_nothing(tmp_path, monkeypatch, how):
    if how == "touch":
        monkeypatch.setattr(sockets, "_populate", lambda address, length: False)
    # half written, half a hole (as a receiver's new output file is)
    data = np.zeros(SIZE, dtype=np.uint8)
    data[: SIZE // 2] = np.random.default_rng(1).integers(0, 256, SIZE // 2, dtype=np.uint8)
    path = tmp_path / "f.bin"
    with open(path, "wb") as fh:
        fh.write(data[: SIZE // 2].tobytes())
        fh.truncate(SIZE)
    with open(path, "r+b") as fh:
        m = mmap.mmap(fh.fileno(), SIZE, access=mmap.ACCESS_WRITE)
        view = memoryview(m)
        if how != "none":
            prefault(view[1:])  # a buffer that starts inside a page
        faults = _faults_writing_every_page(view)
        if how == "none":  # the measurement sees faults where there are some
            assert faults >= PAGES // 4
        else:
            assert faults < PAGES // 20
        assert np.array_equal(np.frombuffer(view, dtype=np.uint8), data)
        view.release()
        m.close()
    assert path.read_bytes() == data.tobytes()


def test_prefault_is_one_madvise_call_on_linux():
    if sockets._madvise() is None:
        pytest.skip("not Linux")
    buf = np.zeros(1 << 20, dtype=np.uint8)
    assert sockets._populate(buf.ctypes.data, len(buf))  # a kernel >= 5.14 has it


def _rss_anon() -> int:
    with open("/proc/self/status") as fh:
        line = next(x for x in fh if x.startswith("RssAnon:"))
    return int(line.split()[1]) << 10


def test_the_sender_registers_its_file_without_copying_it(tmp_path):
    """`sdr send` maps its input copy-on-write; registering it must not fault it in for
    writing, which would copy every page into the process's private memory."""
    import sdr
    from sdr.cli.transfer_pieces import map_file
    from sdr.cli.transfer_send import _transport

    size = 32 << 20
    path = tmp_path / "in.bin"
    path.write_bytes(np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8).tobytes())
    with open(path, "rb") as fh:
        buf = map_file(fh, size, write=False)
        ctx = sdr.Context(_transport("127.0.0.1", 1))
        try:
            before = _rss_anon()
            ctx.register(buf)
            grown = _rss_anon() - before
        finally:
            ctx.close()
    assert grown < size // 8, f"{grown >> 20} MiB of private memory for a {size >> 20} MiB file"
