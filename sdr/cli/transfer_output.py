"""Where a received file lands: ``OUT.partial``, created new, its space reserved.

The receiver writes into ``OUT.partial`` and renames it to ``OUT`` only once its digest
matched. In a shared directory another user may have put something at that name first
(a symbolic link to one of the receiving user's files, say), so the partial file is
created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode 0600: no link is followed and
nothing that exists is opened, truncated or overwritten. If ``OUT.partial`` exists (a
partial transfer kept with ``--keep-partial``, another receiver's, a planted link) the
receiver refuses, before it listens, and says so; it never picks another name, so a
kept partial file is always ``OUT.partial``. The file is mapped through the descriptor
that created it, and renamed only while the name still refers to it; ``OUT`` then gets
the mode any new file gets (0666 less the umask).

The whole size is reserved before any data arrives (``posix_fallocate``): the output is
written through a memory mapping, and a page that the file system cannot back (a full
disk) would otherwise kill the receiver with SIGBUS in the middle of the transfer. Free
space is checked before anything is created (``os.statvfs``), so a set-up announcing
more than the disk holds is refused with one line, and nothing is left behind.
"""

from __future__ import annotations

import errno
import os
from typing import BinaryIO

from sdr.units import format_size

__all__ = ["check_out", "check_space", "create_partial", "partial_path", "publish"]

_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def partial_path(out: str) -> str:
    """Where the receiver writes ``out`` until it is verified: ``out + ".partial"``."""
    return f"{out}.partial"


def check_out(out: str) -> None:
    """OSError unless ``out`` can be received: its directory exists and is writable,
    ``out`` is no directory and nothing is at :func:`partial_path` ``(out)`` yet."""
    directory = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out):
        raise IsADirectoryError(f"--out {out!r} is a directory")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"directory of --out {out!r} does not exist")
    if not os.access(directory, os.W_OK):
        raise PermissionError(f"directory of --out {out!r} is not writable")
    if os.path.lexists(partial_path(out)):
        raise _exists(partial_path(out))


def _exists(partial: str) -> FileExistsError:
    return FileExistsError(
        f"{partial} already exists (a kept partial transfer, another receiver's, or a "
        "link); remove it or choose another --out"
    )


def check_space(out: str, size: int) -> None:
    """OSError unless the file system of ``out`` has ``size`` bytes free (for this user)."""
    directory = os.path.dirname(os.path.abspath(out))
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if size > free:
        raise OSError(
            f"not enough space for {out}: the sender announces {format_size(size)}, "
            f"{format_size(free)} free in {directory}"
        )


def create_partial(out: str, size: int) -> BinaryIO:
    """Create :func:`partial_path` ``(out)`` new (mode 0600, no link followed) with
    ``size`` bytes reserved on disk; the file, open for reading and writing (map it
    through this file: the path could name something else by now). FileExistsError when
    something is there already (left untouched); OSError naming the shortfall when the
    disk is full (the file just created is removed again)."""
    partial = partial_path(out)
    try:
        fd = os.open(partial, _NEW, 0o600)
    except FileExistsError:
        raise _exists(partial) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW on a link (some systems say ELOOP)
            raise _exists(partial) from None
        raise
    try:
        _reserve(fd, size, out)
    except BaseException:
        os.close(fd)
        os.remove(partial)
        raise
    return os.fdopen(fd, "r+b")


def publish(fh: BinaryIO, out: str) -> None:
    """Rename the verified partial file ``fh`` to ``out``, with the mode a new file gets
    (0666 less the umask, as ``cp`` would give it). OSError, and no rename, when
    :func:`partial_path` ``(out)`` no longer names ``fh`` (someone replaced it)."""
    partial = partial_path(out)
    mine, there = os.fstat(fh.fileno()), os.lstat(partial)
    if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
        raise OSError(f"{partial} was replaced during the transfer; {out} left as it was")
    umask = os.umask(0o077)
    os.umask(umask)
    os.fchmod(fh.fileno(), 0o666 & ~umask)
    os.replace(partial, out)


def _reserve(fd: int, size: int, out: str) -> None:
    """Allocate ``size`` bytes of ``fd`` on disk; a file system without fallocate gets a
    sparse file (checked for free space before, by :func:`check_space`)."""
    if size == 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise OSError(
                f"not enough space for {out}: cannot reserve {format_size(size)} "
                f"({os.strerror(exc.errno)})"
            ) from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)
