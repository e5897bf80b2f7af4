"""A real file transfer over SDR: UDP backend (software RoCEv2), a reliability scheme from
config or ``auto``, received into a ring of reused buffers and written to the output
file in order, end-to-end digest (BLAKE3 by default).

    receiver: serve_file("out.bin", bind="10.0.0.2")
    sender:   send_file("in.bin", "10.0.0.2", TransferOptions(scheme="auto", loss=1e-3))

The file moves as reliable messages of ``message_size`` bytes, each verified by the
scheme (per-chunk checksums on the control path); the whole file is hashed on both sides
(the receiver as it writes, :mod:`~sdr.cli.transfer_ring`) and the digests compared over
the out-of-band TCP connection.

The parts: :mod:`~sdr.cli.transfer_options` (options and config),
:mod:`~sdr.cli.transfer_pieces` (the file as messages), :mod:`~sdr.cli.transfer_ring`
(where they land), :mod:`~sdr.cli.transfer_peer`
(the out-of-band conversation), :mod:`~sdr.cli.transfer_send` and
:mod:`~sdr.cli.transfer_receive` (the two sides).
"""

from sdr.cli.transfer_options import (
    DEFAULTS,
    Progress,
    TransferOptions,
    merged_config,
    plan,
    validate_send,
)
from sdr.cli.transfer_receive import partial_path, serve_file
from sdr.cli.transfer_send import send_file

__all__ = [
    "DEFAULTS",
    "Progress",
    "TransferOptions",
    "merged_config",
    "partial_path",
    "plan",
    "send_file",
    "serve_file",
    "validate_send",
]
