"""XOR parity: parity ``i`` is the XOR of the data chunks ``j`` with ``j % m == i``.

Each of the ``m`` groups (``k/m`` data chunks when ``m`` divides ``k``) survives one lost
data chunk, provided its parity chunk arrived. Cheap (memory bound, NumPy) but weaker than
MDS: two losses in one group fail even when other groups lost nothing.
"""

from __future__ import annotations

import numpy as np

from sdr.codecs.base import Codec, Present


class XORCodec(Codec):
    """Interleaved XOR parity over ``m`` groups of data chunks (paper §4, "XOR")."""

    name = "xor"

    def can_recover(self, present: Present) -> bool:
        """True when every group lost at most one data chunk and, if it lost one, not its parity."""
        k_real = len(present) - self.m
        for g in range(self.m):
            lost = sum(1 for j in range(g, k_real, self.m) if not present[j])
            if lost > 1 or (lost == 1 and not present[k_real + g]):
                return False
        return True

    def _encode(
        self, data: list[np.ndarray], parity: list[np.ndarray], whole: np.ndarray | None
    ) -> None:
        for g, out in enumerate(parity):
            self._xor_group(out, [data[j] for j in range(g, len(data), self.m)])

    def _decode(
        self, data: list[np.ndarray], parity: list[np.ndarray | None], missing: list[int]
    ) -> None:
        scratch = np.empty(self.chunk_size, dtype=np.uint8)
        for i in missing:
            g = i % self.m
            group_parity = parity[g]
            assert group_parity is not None  # can_recover checked it
            others = [data[j] for j in range(g, len(data), self.m) if j != i]
            target = data[i]
            if target.size == self.chunk_size:
                self._xor_group(target, [group_parity, *others])
            else:  # a short last chunk: rebuild in full, then keep only its bytes
                self._xor_group(scratch, [group_parity, *others])
                target[:] = scratch[: target.size]

    @staticmethod
    def _xor_group(out: np.ndarray, members: list[np.ndarray]) -> None:
        """``out = XOR of members``, each member zero padded to ``out.size``."""
        full = [c for c in members if c.size == out.size]
        short = [c for c in members if c.size < out.size]
        if not full:
            out[:] = 0
        else:
            np.copyto(out, full[0])
            for c in full[1:]:
                np.bitwise_xor(out, c, out=out)
        for c in short:
            head = out[: c.size]
            np.bitwise_xor(head, c, out=head)

    def _tolerance(self) -> str:
        return "XOR tolerates one lost data chunk per group (j % m), with that group's parity"
