"""MDS Reed-Solomon through pyeclib's ISA-L backend: any ``m`` of ``k + m`` chunks may be lost.

How chunks map onto pyeclib fragments (verified by the tests):

* ``ECDriver.encode(payload)`` splits ``payload`` into ``k`` data fragments and adds ``m``
  parity fragments; each fragment is an 80-byte liberasurecode header followed by its
  payload. For ISA-L the payload of fragment ``i`` is exactly bytes
  ``[i*s, (i+1)*s)`` of a ``k*s``-byte input, with no alignment padding, so encoding the
  concatenation of the ``k`` chunks gives chunk ``i`` as fragment ``i``'s payload and the
  parity chunks as the payloads of fragments ``k .. k+m-1``. Only payloads go on the wire.
* With checksums off (pyeclib's default ``chksum_type``), a header depends only on
  ``(k, m, backend, fragment index, payload length)``, never on the data. The receiver
  therefore rebuilds headers without knowing their layout: at construction it encodes one
  all-zero submessage of the same geometry, keeps the ``k + m`` headers as templates, and
  prefixes each received payload with its template before calling pyeclib.

Copies: encode reads the data in place when the ``k`` chunks are full size and contiguous
(one buffer, as a submessage of a user's send buffer is), else it gathers them once;
pyeclib itself copies into its fragments. Decode copies ``k`` payloads once (pyeclib only
accepts ``bytes`` fragments) and writes each recovered chunk into the caller's buffer. A
few losses go through ``ECDriver.reconstruct`` (per missing fragment), more through
``ECDriver.decode`` (the whole submessage at once, then the missing slices are copied).
"""

from __future__ import annotations

import numpy as np
from pyeclib.ec_iface import ECDriver, ECDriverError

from sdr.codecs.base import Codec, Present, TooManyLosses
from sdr.errors import ConfigError

#: liberasurecode's fragment header size (``sizeof(fragment_header_t)``).
HEADER_SIZE = 80

#: The ISA-L Reed-Solomon backend the paper used; the ``_inv`` variant builds its
#: Vandermonde-based matrix so that every k of k+m fragments decode (plain
#: ``isa_l_rs_vand`` does not guarantee that for larger k and m).
DEFAULT_EC_TYPE = "isa_l_rs_vand_inv"

#: Up to this many lost data chunks, ``ECDriver.reconstruct`` (which rebuilds one fragment
#: per call into liberasurecode) beats ``ECDriver.decode`` (which rebuilds the whole
#: submessage); measured at (32, 8) with 64 KiB chunks, see docs/codecs.md.
RECONSTRUCT_MAX_LOST = 3


class MDSCodec(Codec):
    """Systematic Reed-Solomon (k, m) code run by ISA-L via pyeclib; any m losses recoverable."""

    name = "mds"

    def __init__(self, k: int, m: int, chunk_size: int, ec_type: str = DEFAULT_EC_TYPE) -> None:
        """Create the pyeclib driver for ``(k, m)``; ``ec_type`` picks the pyeclib backend."""
        super().__init__(k, m, chunk_size)
        try:
            # No fragment checksums: headers must not depend on the data (see module doc).
            self._driver = ECDriver(k=k, m=m, ec_type=ec_type, chksum_type="none")
        except ECDriverError as exc:
            raise ConfigError(f"pyeclib ec_type={ec_type!r} with k={k}, m={m}: {exc}") from exc
        self.ec_type = ec_type
        self._zeros = np.zeros(chunk_size, dtype=np.uint8)
        self._headers = self._header_templates()

    def can_recover(self, present: Present) -> bool:
        """True when at most ``m`` of the submessage's chunks are missing."""
        return sum(1 for p in present if not p) <= self.m

    # ----------------------------------------------------------------- encode
    def _encode(
        self, data: list[np.ndarray], parity: list[np.ndarray], whole: np.ndarray | None
    ) -> None:
        fragments = self._encode_payload(whole if whole is not None else self._payload(data))
        for j, out in enumerate(parity):
            frag = fragments[self.k + j]
            out[:] = np.frombuffer(frag, dtype=np.uint8, offset=HEADER_SIZE)

    def _payload(self, data: list[np.ndarray]) -> np.ndarray:
        """The ``k * chunk_size`` bytes to encode: a view when possible, else a padded copy."""
        cs = self.chunk_size
        if len(data) == self.k and all(c.size == cs for c in data):
            first = data[0]
            base = first.ctypes.data
            if all(c.ctypes.data == base + i * cs for i, c in enumerate(data)):
                # The chunks tile one buffer: view it whole (no copy).
                return np.lib.stride_tricks.as_strided(first, shape=(self.k * cs,), strides=(1,))
        out = np.zeros(self.k * cs, dtype=np.uint8)
        for i, c in enumerate(data):
            out[i * cs : i * cs + c.size] = c
        return out

    # ----------------------------------------------------------------- decode
    def _decode(
        self, data: list[np.ndarray], parity: list[np.ndarray | None], missing: list[int]
    ) -> None:
        headers = self._headers
        lost = set(missing)
        fragments: list[bytes] = []
        # Any k fragments suffice: present data first (including the implicit zero chunks
        # of a short submessage), then parity.
        for i in range(self.k):
            if i in lost:
                continue
            chunk = data[i] if i < len(data) else self._zeros
            fragments.append(self._fragment(headers[i], chunk))
        for j, p in enumerate(parity):
            if len(fragments) >= self.k:
                break
            if p is not None:
                fragments.append(self._fragment(headers[self.k + j], p))
        try:
            if len(missing) <= RECONSTRUCT_MAX_LOST:
                rebuilt = self._driver.reconstruct(fragments, list(missing))
                payloads = [memoryview(f)[HEADER_SIZE:] for f in rebuilt]
            else:
                whole = memoryview(self._driver.decode(fragments))
                cs = self.chunk_size
                payloads = [whole[i * cs : (i + 1) * cs] for i in missing]
        except ECDriverError as exc:  # can_recover said yes, so this is a backend failure
            raise TooManyLosses(f"{self!r}: pyeclib could not rebuild {missing}: {exc}") from exc
        for i, payload in zip(missing, payloads, strict=True):
            target = data[i]
            target[:] = np.frombuffer(payload, dtype=np.uint8, count=target.size)

    def _fragment(self, header: bytes, chunk: np.ndarray) -> bytes:
        if chunk.size == self.chunk_size:
            return b"".join((header, chunk.data))
        return b"".join((header, chunk.data, bytes(self.chunk_size - chunk.size)))

    def _header_templates(self) -> list[bytes]:
        """Fragment headers for this geometry, taken from one encode of zeros.

        Also checks that the backend maps chunks onto fragment payloads one to one (ISA-L
        does; e.g. ``liberasurecode_rs_vand`` pads payloads and is refused).
        """
        frags = self._encode_payload(np.zeros(self.k * self.chunk_size, np.uint8))
        sizes = {len(f) - HEADER_SIZE for f in frags}
        if sizes != {self.chunk_size}:
            raise ConfigError(
                f"ec_type={self.ec_type!r}: fragment payloads of {sorted(sizes)} bytes, "
                f"expected exactly chunk_size={self.chunk_size}"
            )
        return [bytes(f[:HEADER_SIZE]) for f in frags]

    def _encode_payload(self, payload: np.ndarray) -> list[bytes]:
        """pyeclib's encode; it reads a NumPy array in place but refuses memoryviews."""
        try:
            return self._driver.encode(payload)  # type: ignore[arg-type]  # hints say bytes
        except ECDriverError:
            return self._driver.encode(payload.tobytes())  # a pyeclib that wants bytes only

    def _tolerance(self) -> str:
        return f"Reed-Solomon recovers any {self.m} losses"
