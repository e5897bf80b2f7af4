"""The 32-bit immediate carried by every packet: message id | packet offset | user fragment.

Default split (the paper's): 10 bits of message id (1024 messages in flight per QP),
18 bits of packet offset (1 GiB at a 4 KiB MTU) and 4 bits of the user's immediate. The
user's 32-bit immediate is spread over packets, ``user_bits`` per packet: the packet at
offset ``p`` carries fragment ``p % fragments``. The receiver reassembles it once it has
seen one packet of every fragment index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdr.errors import ConfigError

__all__ = ["ImmediateLayout"]


@dataclass(frozen=True, slots=True)
class ImmediateLayout:
    """How the 32 bits of the immediate are split. Fields are bit counts that sum to 32."""

    id_bits: int = 10
    offset_bits: int = 18
    user_bits: int = 4

    def __post_init__(self) -> None:
        for name in ("id_bits", "offset_bits", "user_bits"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"immediate {name} must be an integer >= 1, got {value!r}")
        total = self.id_bits + self.offset_bits + self.user_bits
        if total != 32:
            raise ConfigError(
                f"immediate split {self.id_bits}+{self.offset_bits}+{self.user_bits} = {total} "
                "bits; the three parts must add up to 32 (e.g. 10+18+4 or 8+22+2)"
            )

    @property
    def max_message_ids(self) -> int:
        """Distinct message ids before the id wraps around."""
        return 1 << self.id_bits

    @property
    def max_packets(self) -> int:
        """Largest number of packets one message may have."""
        return 1 << self.offset_bits

    @property
    def fragments(self) -> int:
        """Packets needed to carry the whole 32-bit user immediate."""
        return -(-32 // self.user_bits)

    @property
    def _id_shift(self) -> int:
        return self.offset_bits + self.user_bits

    def encode(self, msg_id: int, packet_offset: int, user_fragment: int) -> int:
        """Pack one immediate. Raises ConfigError when a field does not fit its bits."""
        if not 0 <= msg_id < self.max_message_ids:
            raise ConfigError(f"message id {msg_id} does not fit in {self.id_bits} bits")
        if not 0 <= packet_offset < self.max_packets:
            raise ConfigError(
                f"packet offset {packet_offset} does not fit in {self.offset_bits} bits"
            )
        if not 0 <= user_fragment < (1 << self.user_bits):
            raise ConfigError(
                f"user fragment {user_fragment} does not fit in {self.user_bits} bits"
            )
        return (msg_id << self._id_shift) | (packet_offset << self.user_bits) | user_fragment

    def decode(self, imm: int) -> tuple[int, int, int]:
        """Unpack one immediate into (message id, packet offset, user fragment)."""
        if not 0 <= imm < 1 << 32:
            raise ConfigError(f"immediate {imm!r} is not a 32-bit unsigned value")
        return (
            imm >> self._id_shift,
            (imm >> self.user_bits) & (self.max_packets - 1),
            imm & ((1 << self.user_bits) - 1),
        )

    def encode_many(self, msg_id: int, packet_offsets: np.ndarray, user_imm: int) -> np.ndarray:
        """Immediates for many packets of one message, each carrying its user fragment."""
        offsets = packet_offsets.astype(np.uint32)
        fragments = self.fragment_of(offsets, user_imm)
        return (
            np.uint32(msg_id << self._id_shift) | (offsets << np.uint32(self.user_bits)) | fragments
        ).astype(np.uint32)

    def decode_many(self, imms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorized :meth:`decode` over a uint32 array."""
        imms = imms.astype(np.uint32, copy=False)
        ids = imms >> np.uint32(self._id_shift)
        offsets = (imms >> np.uint32(self.user_bits)) & np.uint32(self.max_packets - 1)
        fragments = imms & np.uint32((1 << self.user_bits) - 1)
        return ids, offsets, fragments

    def fragment_of(self, packet_offsets: np.ndarray, user_imm: int) -> np.ndarray:
        """The user fragment that the packets at these offsets carry."""
        index = packet_offsets.astype(np.uint32) % np.uint32(self.fragments)
        shifted = np.uint64(user_imm) >> (index.astype(np.uint64) * np.uint64(self.user_bits))
        return (shifted & np.uint64((1 << self.user_bits) - 1)).astype(np.uint32)

    def assemble(self, fragments: np.ndarray) -> int:
        """Rebuild the 32-bit user immediate from its fragments, index 0 first."""
        value = 0
        for index, fragment in enumerate(fragments.tolist()):
            value |= int(fragment) << (index * self.user_bits)
        return value & 0xFFFFFFFF
