"""The software NIC's receive step: validate, place, mark and count a batch of packets.

Every software driver (inproc, udp, offload, the simulator's) receives a packet the same
way, and does it here: :func:`place_batch` resolves each packet through the key table,
checks it, copies its payload into the bound region, sets its packet byte (the placement
guard) and its chunk's arrival count, and counts it under a discard reason when anything
fails. Nothing that fails is written.

The state is flat arrays (a :class:`PlacementTable`) and a batch is arrays, so the same
step runs over a Python key table (:class:`sdr.key_table.KeyTable`), over the offload
backend's shared memory, and in native code behind the same signature. This module is
the one entry point; the pieces live beside it:

- :mod:`sdr.placement_table`: the verdict codes, the entry layout, the geometry, the
  table and :func:`chunk_bitmap`;
- :mod:`sdr.placement_reference`: the rules, in order, and :func:`place_batch_python`,
  the reference implementation.

Two implementations sit behind :func:`place_batch`: the native one (``sdr._placement``,
C, built by the package's own build) and :func:`place_batch_python`, the reference. The
native one is used when it is built, unless the environment variable
``SDR_DATAPATH=python`` is set at import or :func:`use_datapath` chooses otherwise;
:data:`DATAPATH` names the one in use (docs/native.md).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from sdr.errors import ConfigError
from sdr.native import load_extension
from sdr.placement_reference import check_packets, classify, place_batch_python
from sdr.placement_table import (
    DISCARD_REASONS,
    DUPLICATE,
    ENTRY_WORDS,
    LATE,
    MALFORMED,
    OUT_OF_RANGE,
    PLACED,
    STALE_GENERATION,
    VERDICT_NAMES,
    PlacementGeometry,
    PlacementTable,
    chunk_bitmap,
)

__all__ = [
    "DISCARD_REASONS",
    "DUPLICATE",
    "ENTRY_WORDS",
    "LATE",
    "MALFORMED",
    "OUT_OF_RANGE",
    "PLACED",
    "STALE_GENERATION",
    "VERDICT_NAMES",
    "DATAPATH",
    "DATAPATH_ENV",
    "PlacementGeometry",
    "PlacementTable",
    "check_packets",
    "chunk_bitmap",
    "classify",
    "int64_column",
    "place_batch",
    "place_batch_native",
    "mark_arrivals_native",
    "chunk_crcs_native",
    "chunk_sums_native",
    "place_batch_python",
    "use_datapath",
]


def int64_column(values: Sequence[int]) -> np.ndarray:
    """Python ints from a wire as int64; a value int64 cannot hold becomes -1, which every
    column of :func:`place_batch` refuses (a negative generation, offset or length)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        low, high = -(1 << 63), 1 << 63
        return np.array([v if low <= v < high else -1 for v in values], dtype=np.int64)


# --- which implementation runs (the native one when built) ------------------------------

DATAPATH_ENV = "SDR_DATAPATH"
"""Environment variable read at import: ``python`` runs the reference even where the
native implementation is built; ``native`` (or unset) the native one where it is."""
_NATIVE_FILE_ENV = "SDR_PLACEMENT_NATIVE"
"""A path to a build of ``sdr._placement`` to load instead of the installed one (the
sanitizer build, ``make asan``)."""


_native, NATIVE_ERROR = load_extension("sdr._placement", _NATIVE_FILE_ENV)

place_batch_native: Any = None if _native is None else _native.place_batch
"""The native place_batch (``sdr._placement``), None where it was not built."""
mark_arrivals_native: Any = getattr(_native, "mark_arrivals", None)  # None: an older build
"""The native twin of the receive table's arrival marking (RecvTable._apply), None where
``sdr._placement`` was not built; it runs where :data:`DATAPATH` is ``native``."""
chunk_crcs_native: Any = getattr(_native, "chunk_crcs", None)
"""The chunk checksums of :func:`sdr.reliability.integrity.chunk_crcs` in one call, None
where ``sdr._placement`` was not built; it runs where :data:`DATAPATH` is ``native``."""

chunk_sums_native: Any = getattr(_native, "chunk_sums", None)
"""The chunk checksums combined from packet checksums
(:meth:`sdr.chunk_bitmap.ReceiveBitmap.chunk_sums`) in one call, None where
``sdr._placement`` was not built; it runs where :data:`DATAPATH` is ``native``."""

DATAPATH = "python"
"""The implementation :func:`place_batch` runs: ``native`` or ``python``."""
_impl: Any = place_batch_python


def use_datapath(name: str) -> str:
    """Make :func:`place_batch` run ``name`` (``native`` or ``python``); returns the
    previous choice. Raises ConfigError for another name or a native one not built."""
    global DATAPATH, _impl
    if name not in ("native", "python"):
        raise ConfigError(f"datapath must be 'native' or 'python', got {name!r}")
    if name == "native" and place_batch_native is None:
        raise ConfigError(f"the native datapath is not built ({NATIVE_ERROR})")
    previous, DATAPATH = DATAPATH, name
    _impl = place_batch_native if name == "native" else place_batch_python
    return previous


def _initial_datapath() -> None:
    wanted = os.environ.get(DATAPATH_ENV, "").strip().lower()
    if wanted not in ("", "native", "python"):
        warnings.warn(
            f"{DATAPATH_ENV} must be 'native' or 'python', got {wanted!r}: using the default",
            RuntimeWarning,
            stacklevel=3,
        )
        wanted = ""
    if wanted == "python":
        return
    if place_batch_native is None:
        warnings.warn(
            f"sdr._placement is not built ({NATIVE_ERROR}): packets are placed by the "
            "Python reference (reinstall with a C compiler for the native datapath)",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    use_datapath("native")


_initial_datapath()


def place_batch(
    table: PlacementTable,
    generations: np.ndarray,
    remote_offsets: np.ndarray,
    imms: np.ndarray,
    lengths: np.ndarray,
    payloads: Sequence[Any] | Any | None,
    payload_offsets: np.ndarray | None = None,
) -> np.ndarray:
    """Validate and place one batch of received packets, in order; returns the verdicts.

    The rules and arguments are :func:`place_batch_python`'s; this runs the implementation
    :data:`DATAPATH` names. The native one takes integer arrays (any integer dtype,
    C-contiguous) and byte buffers, and raises TypeError or ValueError, having placed
    nothing, where an input does not fit the table or a copy would leave a buffer.
    """
    return _impl(table, generations, remote_offsets, imms, lengths, payloads, payload_offsets)
