"""The codec interface shared by every erasure code of the Erasure Coding scheme.

A codec protects one *submessage*: up to ``k`` data chunks plus ``m`` parity chunks, all of
``chunk_size`` bytes. Chunks are passed as buffers (NumPy ``uint8`` arrays, memoryviews,
bytearrays); the codec reads them where they are and writes recovered data straight into
the buffers it is handed, so a receiver can pass views into the user's receive buffer.

Layout and padding rules (the same for every codec):

* ``chunks`` for :meth:`Codec.decode` is ``data_0 .. data_{k'-1}, parity_0 .. parity_{m-1}``
  with ``1 <= k' <= k``: the number of data chunks is ``len(chunks) - m``.
* A submessage with ``k' < k`` data chunks (the last one of a message) is coded as if data
  chunks ``k' .. k-1`` were present and all zero. They are never sent and never lost.
* A data chunk shorter than ``chunk_size`` (the last chunk of a message) is logically
  padded with zeros up to ``chunk_size``. Encode reads only its bytes; decode writes only
  ``len(buffer)`` bytes into it, never past the end of the user's buffer.
* Parity chunks are always exactly ``chunk_size`` bytes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from sdr.errors import ConfigError, MessageFailed

Present = Sequence[bool] | np.ndarray
"""One flag per chunk of a submessage: a sequence of bools or a boolean array."""

#: Anything exposing a C-contiguous byte buffer: ``np.ndarray``, ``memoryview``,
#: ``bytearray``, ``bytes`` (read-only: fine for inputs, refused where we must write).
Buffer = Any


class TooManyLosses(MessageFailed):
    """More chunks of a submessage were lost than its code can recover."""


def as_u8(buf: Buffer, *, writable: bool = False, what: str = "chunk") -> np.ndarray:
    """View ``buf`` as a flat ``uint8`` array without copying.

    Raises :class:`ConfigError` if the buffer is not contiguous, or is read-only while
    ``writable`` is requested.
    """
    if type(buf) is np.ndarray and buf.dtype == np.uint8 and buf.ndim == 1:
        if not buf.flags.c_contiguous:
            raise ConfigError(f"{what}: expected a C-contiguous array, got strides {buf.strides}")
        arr = buf  # the common case: a 1-D uint8 view, used as is
    elif isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise ConfigError(f"{what}: expected a C-contiguous array, got strides {buf.strides}")
        arr = buf.reshape(-1).view(np.uint8)
    else:
        try:
            view = memoryview(buf)
        except TypeError as exc:
            raise ConfigError(f"{what}: expected a bytes-like buffer, got {type(buf)!r}") from exc
        if not view.c_contiguous:
            raise ConfigError(f"{what}: expected a C-contiguous buffer")
        arr = np.frombuffer(view.cast("B"), dtype=np.uint8)
    if writable and not arr.flags.writeable:
        raise ConfigError(f"{what}: expected a writable buffer, got a read-only one")
    return arr


class Codec(ABC):
    """A systematic erasure code over ``k`` data and ``m`` parity chunks of ``chunk_size`` bytes.

    Subclasses implement :meth:`_encode`, :meth:`_decode` and :meth:`can_recover`; this
    class validates arguments and applies the layout and padding rules of the module
    docstring, so subclasses always see well-formed input.
    """

    #: Registry name of the codec (``"mds"``, ``"xor"``).
    name: str = ""

    def __init__(self, k: int, m: int, chunk_size: int) -> None:
        """Set up a (k, m) code over chunks of ``chunk_size`` bytes."""
        for label, value, low in (("k", k, 1), ("m", m, 1), ("chunk_size", chunk_size, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{label}={value!r}: expected an integer >= {low}")
        self.k = k
        self.m = m
        self.chunk_size = chunk_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self.k}, m={self.m}, chunk_size={self.chunk_size})"

    # ----------------------------------------------------------------- public API
    def encode(
        self,
        data_chunks: Sequence[Buffer] | np.ndarray,
        parity_out: Sequence[Buffer] | None = None,
    ) -> list[np.ndarray]:
        """Compute the ``m`` parity chunks of ``1..k`` data chunks.

        ``data_chunks`` are read in place (each at most ``chunk_size`` bytes, shorter ones
        zero padded). A C-contiguous ``(k, chunk_size)`` array (one row per chunk) is the
        fastest form: codecs that need the submessage as one buffer use it without copying.
        With ``parity_out`` (``m`` writable buffers of ``chunk_size`` bytes) parity is
        written there and those buffers are returned as arrays; otherwise new arrays are
        allocated.
        """
        whole = None
        if isinstance(data_chunks, np.ndarray):
            if data_chunks.ndim != 2 or not data_chunks.flags.c_contiguous:
                raise ConfigError(
                    f"data_chunks: expected a C-contiguous 2-D array (chunks x bytes), "
                    f"got shape {data_chunks.shape}"
                )
            rows = data_chunks.view(np.uint8)
            if rows.shape == (self.k, self.chunk_size):
                whole = rows.reshape(-1)
            data_chunks = list(rows)
        data = self._check_data(data_chunks, role="data chunk")
        if parity_out is None:
            parity = [np.empty(self.chunk_size, dtype=np.uint8) for _ in range(self.m)]
        else:
            if len(parity_out) != self.m:
                raise ConfigError(f"parity_out: expected {self.m} buffers, got {len(parity_out)}")
            parity = [
                self._check_len(as_u8(p, writable=True, what=f"parity_out[{i}]"), exact=True)
                for i, p in enumerate(parity_out)
            ]
        self._encode(data, parity, whole)
        return parity

    def decode(self, chunks: Sequence[Buffer | None], present: Sequence[bool]) -> list[int]:
        """Recover the missing data chunks of a submessage, writing them in place.

        ``chunks`` holds ``k'`` data chunks followed by ``m`` parity chunks
        (``1 <= k' <= k``); ``present[i]`` says whether chunk ``i`` arrived. Buffers of
        missing data chunks must be writable (they are filled); a missing parity chunk may
        be ``None``. Missing parity is not rebuilt. Returns the indices of the data chunks
        that were recovered. Raises :class:`TooManyLosses` if the losses exceed what the
        code tolerates; then no buffer has been written.
        """
        n = len(chunks)
        if len(present) != n:
            raise ConfigError(f"present: expected {n} flags (one per chunk), got {len(present)}")
        k_real = n - self.m
        if not 1 <= k_real <= self.k:
            raise ConfigError(
                f"chunks: expected {self.m + 1}..{self.k + self.m} buffers "
                f"(1..{self.k} data + {self.m} parity), got {n}"
            )
        mask = np.array([bool(p) for p in present], dtype=bool)
        missing = [i for i in range(k_real) if not mask[i]]
        if not missing:
            return []
        if not self.can_recover(mask):
            lost = [i for i in range(n) if not mask[i]]
            raise TooManyLosses(
                f"{type(self).__name__}(k={self.k}, m={self.m}): chunks {lost} of {n} lost; "
                f"{self._tolerance()}"
            )
        data: list[np.ndarray | None] = []
        for i in range(k_real):
            buf = chunks[i]
            if buf is None:
                raise ConfigError(f"chunks[{i}]: a data chunk needs a buffer, got None")
            arr = as_u8(buf, writable=not mask[i], what=f"chunks[{i}]")
            data.append(self._check_len(arr, exact=False, what=f"chunks[{i}]"))
        parity: list[np.ndarray | None] = []
        for j in range(self.m):
            buf = chunks[k_real + j]
            if not mask[k_real + j] or buf is None:
                parity.append(None)
                mask[k_real + j] = False
                continue
            arr = as_u8(buf, what=f"chunks[{k_real + j}]")
            parity.append(self._check_len(arr, exact=True, what=f"chunks[{k_real + j}]"))
        self._decode(data, parity, missing)  # type: ignore[arg-type]
        return missing

    @abstractmethod
    def can_recover(self, present: Present) -> bool:
        """Whether the data of a submessage can be rebuilt from the chunks flagged present.

        ``present`` has one flag per chunk, ``k'`` data then ``m`` parity, as in
        :meth:`decode`. A receiver may ACK a submessage as soon as this is true.
        """

    # ----------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _encode(
        self, data: list[np.ndarray], parity: list[np.ndarray], whole: np.ndarray | None
    ) -> None:
        """Write parity of ``data`` (1..k arrays, each <= chunk_size) into ``parity``.

        ``whole`` is the submessage as one ``k * chunk_size`` buffer when the caller passed
        it that way (``data`` are then views of it), else ``None``.
        """

    @abstractmethod
    def _decode(
        self, data: list[np.ndarray], parity: list[np.ndarray | None], missing: list[int]
    ) -> None:
        """Fill ``data[i]`` for ``i`` in ``missing``; recoverability is already checked."""

    @abstractmethod
    def _tolerance(self) -> str:
        """A short phrase saying which losses the code tolerates, for error messages."""

    # ----------------------------------------------------------------- helpers
    def _check_data(self, chunks: Sequence[Buffer], role: str) -> list[np.ndarray]:
        if not 1 <= len(chunks) <= self.k:
            raise ConfigError(f"data_chunks: expected 1..{self.k} chunks, got {len(chunks)}")
        return [
            self._check_len(as_u8(c, what=f"{role} {i}"), exact=False, what=f"{role} {i}")
            for i, c in enumerate(chunks)
        ]

    def _check_len(self, arr: np.ndarray, *, exact: bool, what: str = "parity") -> np.ndarray:
        size = arr.size
        if size > self.chunk_size or (exact and size != self.chunk_size):
            expected = f"{self.chunk_size}" if exact else f"at most {self.chunk_size}"
            raise ConfigError(f"{what}: {size} bytes, expected {expected} (chunk_size)")
        return arr
