"""The native receive step (``sdr._placement``) against the Python reference.

Random tables and batches (tools/fuzz/targets_placement.py builds them: good, duplicate,
sealed, late, stale, out-of-range, malformed and garbage int64 values, the three payload
forms) must give identical verdicts, packet bytes, chunk counts, discard counters and
memory. Also: the selection (``SDR_DATAPATH``, :func:`sdr.placement.use_datapath`), the
input checks, the GIL released around a batch, and the sanitizer build on request.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sdr
import sdr.placement as placement
from sdr.placement import (
    PLACED,
    PlacementGeometry,
    PlacementTable,
    place_batch_native,
)
from sdr.transport import Bind

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "fuzz"))
from targets_placement import build_case, differential  # noqa: E402

needs_native = pytest.mark.skipif(place_batch_native is None, reason="sdr._placement not built")


def test_the_extension_is_built_in_ci() -> None:
    """`make test` builds sdr._placement; in CI a missing build is a failure."""
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip("CI is not set: a build without a compiler may fall back to Python")
    assert place_batch_native is not None, placement.NATIVE_ERROR
    assert placement.DATAPATH == "native" or os.environ.get("SDR_DATAPATH") == "python"


@needs_native
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_native_and_reference_agree_on_random_tables_and_batches(data: st.DataObject) -> None:
    differential(build_case(lambda lo, hi: data.draw(st.integers(lo, hi))))


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=1024))
def test_native_and_reference_agree_on_fuzz_bytes(raw: bytes) -> None:
    from registry import Reader
    from targets_placement import reader_draw

    differential(build_case(reader_draw(Reader(raw))))


ATTR = sdr.QPAttr(mtu=100, chunk_size=200, max_message_size=1000, max_messages=4)
GEOMETRY = PlacementGeometry.from_attr(ATTR)


def _batch(n: int = 3) -> tuple[np.ndarray, ...]:
    p = np.arange(n, dtype=np.int64)
    return (
        np.zeros(n, np.int64),
        p * 100,
        np.array([ATTR.layout.encode(1, int(i), 0) for i in p], np.uint32),
        np.full(n, 100, np.int64),
    )


@needs_native
@pytest.mark.parametrize(
    "column, bad, error, words",
    [
        (1, np.zeros(3, np.float64), TypeError, "remote_offsets"),
        (3, np.zeros(4, np.int64), ValueError, "lengths has 4 values"),
        (1, np.zeros((3, 1), np.int64), TypeError, "remote_offsets"),
        (2, np.zeros(6, np.uint32)[::2], TypeError, "imms"),
        (0, [0, 0, 0], TypeError, "generations"),
    ],
)
def test_native_refuses_ill_shaped_columns(column, bad, error, words) -> None:
    table = PlacementTable(GEOMETRY, regions={0: memoryview(bytearray(1000))})
    cols = list(_batch())
    cols[column] = bad
    with pytest.raises(error, match=words):
        place_batch_native(table, *cols, None)
    assert not table.packets.any() and not table.discards.any()


@needs_native
def test_native_refuses_a_copy_outside_a_buffer_and_writes_nothing() -> None:
    memory = bytearray(250)  # the binding says 300 bytes: packet 2 would not fit
    region = sdr.MemoryRegion(key=0, view=memoryview(memory))
    table = PlacementTable(GEOMETRY)
    table.bind(Bind(generation=0, slot=0, region=region, offset=0, length=300, msg_id=1), 0)
    with pytest.raises(ValueError, match="outside its region"):
        place_batch_native(table, *_batch(), [b"\x01" * 100] * 3)
    assert not any(memory) and not table.packets.any() and not table.discards.any()
    with pytest.raises(ValueError, match="payloads has 2 buffers"):
        place_batch_native(table, *_batch(), [b"\x01" * 100] * 2)
    table.regions[0] = memoryview(bytearray(1000))
    with pytest.raises(ValueError, match="outside its buffer"):  # the staging ends at 250
        place_batch_native(table, *_batch(), memoryview(bytes(250)), np.array([0, 100, 200]))
    assert not table.packets.any() and not table.discards.any()
    with pytest.raises(IndexError, match="entries"):
        short = PlacementTable(GEOMETRY, entries=np.zeros((0, 6), np.int64))
        place_batch_native(short, *_batch(), None)


def test_the_datapath_is_chosen_by_name() -> None:
    previous = placement.use_datapath("python")
    try:
        assert placement.DATAPATH == "python"
        with pytest.raises(sdr.ConfigError, match="'native' or 'python'"):
            placement.use_datapath("fast")
        if place_batch_native is not None:
            placement.use_datapath("native")
            assert placement.DATAPATH == "native"
    finally:
        placement.use_datapath(previous)


@pytest.mark.parametrize("value, want", [("python", "python"), ("", "native")])
def test_sdr_datapath_selects_at_import(value: str, want: str) -> None:
    if want == "native" and place_batch_native is None:
        want = "python"
    env = {**os.environ, "SDR_DATAPATH": value}
    out = subprocess.run(
        [sys.executable, "-c", "import sdr.placement as p; print(p.DATAPATH)"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == want


# --- the GIL ---------------------------------------------------------------------------


@needs_native
def test_the_gil_is_released_while_a_batch_is_placed() -> None:
    """Another thread runs Python while a native call is half way through its batch.

    The batch places 512K packets in order (no payloads: packet bytes and counts only).
    The watcher sets an Event when it sees the first packet byte set and the last one
    not yet: a state that exists only inside the call, so it can only be seen if the
    call let go of the GIL. No clock is read; the watcher gets many batches to be
    scheduled in (two shared cores), and must see it at least once.
    """
    mtu, per_slot, slots = 64, 1 << 17, 4
    attr_layout = sdr.ImmediateLayout(10, 18, 4)
    g = PlacementGeometry(attr_layout, 1, slots, mtu * per_slot, mtu, 16)
    pkt = np.tile(np.arange(per_slot, dtype=np.int64), slots)
    slot = np.repeat(np.arange(slots, dtype=np.int64), per_slot)
    cols = (
        np.zeros(len(pkt), np.int64),
        slot * g.slot_size + pkt * mtu,
        ((pkt << 4) | (pkt % attr_layout.fragments)).astype(np.uint32),  # message id 0
        np.full(len(pkt), mtu, np.int64),
    )
    region = sdr.MemoryRegion(key=0, view=memoryview(bytearray(0)))  # no payloads: no copy
    every_slot = [
        Bind(generation=0, slot=s, region=region, offset=0, length=g.slot_size, msg_id=0)
        for s in range(slots)
    ]
    seen = threading.Event()
    # 50 batches, and the watcher already spinning when each call starts: beside two busy
    # loops, 10 batches with a watcher just started once passed without it being scheduled
    for _ in range(50):
        table = PlacementTable(g)
        for binding in every_slot:
            table.bind(binding, 0)
        first, last = table.packets[0, :1], table.packets[slots - 1, per_slot - 1 :]
        done, running = threading.Event(), threading.Event()

        def watch(first=first, last=last, done=done, running=running) -> None:
            running.set()
            while not done.is_set():
                if first[0] and not last[0]:
                    seen.set()
                    return

        watcher = threading.Thread(target=watch)
        watcher.start()
        running.wait()
        verdicts = place_batch_native(table, *cols, None)
        done.set()
        watcher.join()
        assert (verdicts == PLACED).all() and table.packets.all()
        if seen.is_set():
            break
    assert seen.is_set(), "no other thread ran while the native call placed its batch"


# --- the sanitizer build, on request ----------------------------------------------------


@pytest.mark.skipif(not os.environ.get("SDR_TEST_ASAN"), reason="set SDR_TEST_ASAN=1")
def test_the_placement_tests_pass_under_asan_and_ubsan() -> None:
    """`make asan`: the extension built with -fsanitize=address,undefined, these tests and
    the seam's run against it (slow: minutes; CI runs it as a separate short pass)."""
    env = {k: v for k, v in os.environ.items() if k != "SDR_TEST_ASAN"}
    out = subprocess.run(["make", "-s", "asan"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=1200)  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "passed" in out.stdout
