"""The one error hierarchy of the SDK, rooted at :class:`SDRError`.

Every message names the bad value and what was expected, so a user can fix the call
without reading the source.
"""

from __future__ import annotations

import builtins


class SDRError(Exception):
    """Base class of every error the SDK raises on purpose."""


class ConfigError(SDRError, ValueError):
    """An attribute, config value or argument is invalid (wrong type, range or unit)."""


class TransportError(SDRError):
    """A backend could not move data (socket error, missing device, peer gone)."""


class ProtocolError(SDRError):
    """The protocol was broken, by the peer (:class:`RemoteProtocolError`) or by this end's
    own use of it (:class:`LocalProtocolError`); catch this to catch both."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol: a malformed, damaged or forged control message, peer
    info that does not parse or does not fit, an incompatible scheme. Nothing this end
    called was wrong; the input came from the network."""


class LocalProtocolError(ProtocolError):
    """This end used the protocol wrongly: a control message over the size limit, a write
    to a generation or receive the peer never announced. A bug in the caller, not in what
    came from the network."""


class ResourceBusy(SDRError):
    """A bounded resource is full (all message slots in use); retry after progress.

    The paper's C API returns RETRY in this case.
    """


class TimeoutError(SDRError, builtins.TimeoutError):  # noqa: A001 - deliberate, documented name
    """An operation did not finish in time (a wait, or a reliability scheme's global timeout)."""


class MessageFailed(SDRError):
    """A message was given up: its bytes are not (all) correct and it is not complete."""


class Cancelled(MessageFailed):
    """The application cancelled a write or receive before it completed (both ends agreed
    to drop it: e.g. the late slices of a deadline-bounded allreduce)."""


class BackendNotFound(ConfigError):
    """No backend of that name is registered in the ``sdr.backends`` entry-point group."""
