"""Writing files atomically: the one helper every hypann writer goes through.

:func:`atomic_write` writes to a temporary file in the destination folder and
moves it into place with :func:`os.replace`, so a reader sees either the old
file or the complete new one, never a half-written file, and a failed write
leaves nothing behind. The result behaves like a file written with
:func:`open`:

* a new file gets the mode ``0o666 & ~umask`` (``tempfile.mkstemp`` creates
  ``0o600``); a replaced regular file keeps its permission bits;
* a path that is a symbolic link is written *through*: the link stays and its
  target is replaced (the temporary file lives in the target's folder, so the
  final rename never crosses file systems);
* a missing or unwritable folder, or a path that is a directory, raises an
  :class:`OSError` whose message names the path and what is wrong.

No imports from the rest of hypann: any layer may use this module.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

__all__ = ["atomic_write", "check_destination", "current_umask"]


def current_umask() -> int:
    """The process umask, read without changing it when the platform allows.

    Linux reports it in ``/proc/self/status``; elsewhere it is read by setting
    and restoring it (``os.umask`` has no read-only form).
    """
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _os_error(exc: OSError, message: str) -> OSError:
    """An error of the same class as ``exc`` (so ``except PermissionError`` still works) with ``message``."""
    err = type(exc)(message)
    err.errno = exc.errno
    return err


def _destination(path: str, make_parents: bool) -> str:
    """The file that will be replaced: ``path`` with symbolic links resolved; checks its folder."""
    if not path:
        raise ValueError("cannot write to an empty path")
    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot write {path!r}: it is a directory")
    folder = os.path.dirname(target)
    if make_parents:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise _os_error(exc, f"cannot write {path!r}: cannot create folder {folder!r}: {exc.strerror}") from None
    if not os.path.isdir(folder):
        what = f"{folder!r} is not a folder" if os.path.exists(folder) else f"folder {folder!r} does not exist"
        raise FileNotFoundError(f"cannot write {path!r}: {what}")
    return target


def check_destination(path) -> str:
    """Fail early, before expensive work, if ``path`` cannot be written; returns the resolved target.

    Checks what :func:`atomic_write` will need: ``path`` is not a directory,
    its folder exists and (for non-root users) allows creating files.
    """
    path = os.fspath(path)
    target = _destination(path, make_parents=False)
    folder = os.path.dirname(target)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write {path!r}: no permission to create files in {folder!r}")
    return target


def atomic_write(path, write, *, text: bool = False, make_parents: bool = False) -> None:
    """Create or replace the file ``path`` with what ``write(fileobj)`` writes, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        Destination. A symbolic link is followed and its target replaced.
    write : callable
        Called once with an open file object (binary, or UTF-8 text if
        ``text``); whatever it writes becomes the file's content.
    text : bool, default False
        Open the temporary file in text mode (UTF-8).
    make_parents : bool, default False
        Create missing folders of the destination first (like ``mkdir -p``).

    Raises
    ------
    FileNotFoundError
        The destination folder does not exist (and ``make_parents`` is False).
    IsADirectoryError
        ``path`` is a directory.
    PermissionError
        The folder is not writable.
    Exception
        Whatever ``write`` raises; the destination is then unchanged and no
        temporary file remains.
    """
    path = os.fspath(path)
    target = _destination(path, make_parents)
    folder, name = os.path.split(target)
    try:
        old_mode = stat.S_IMODE(os.stat(target).st_mode) if os.path.isfile(target) else None
    except OSError:
        old_mode = None
    mode = old_mode if old_mode is not None else 0o666 & ~current_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise _os_error(exc, f"cannot write {path!r}: cannot create a file in {folder!r}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
