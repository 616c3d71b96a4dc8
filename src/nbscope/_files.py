"""Writing the user's files safely: the one place nbscope writes a file it was asked to write (``-o FILE``,
``export``, ``merge``, ``report``, ``--html``, ``--append-to``).

- ``-`` and ``/dev/stdout`` mean standard output: the text is written there, no file is made or replaced.
- A target is replaced only when it is a regular file or does not exist yet. A symbolic link, a device,
  a FIFO or a socket is refused in one line (exit 2) and left as it is: replacing a link by a file
  would break whatever the link served (``/dev/stdout`` itself is a link).
- The text goes to a temporary file with a unique name beside the target (``tempfile.mkstemp`` in the
  same folder, so the final rename stays on one file system and is atomic), which is then renamed over
  the target. A reader sees the old file or the new one, never half of one, and no file of the user's
  (a ``FILE.tmp`` of their own) is ever overwritten or renamed away.
- The target's folder must exist and be writable: a missing, unwritable or not-a-folder parent is one
  line, exit 2, and nothing is made (a mistyped path never grows a tree of folders).
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from nbscope._errors import NbscopeError

STDOUT_NAMES = ("-", "/dev/stdout")


def is_stdout(path: str | Path) -> bool:
    """Whether ``path`` asks for standard output (``-`` or ``/dev/stdout``)."""
    return str(path) in STDOUT_NAMES


def check_target(path: str | Path, *, option: str = "-o") -> Path:
    """Refuse, in one line, a target nbscope must not replace or whose folder is missing. Returns the path.

    Called before a long job (an audit, a report) so that a bad ``-o`` fails before anything runs."""
    path = Path(path)
    if is_stdout(path):
        return path
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise NbscopeError(f"{option} {path}: cannot be written ({exc.strerror or exc})") from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise NbscopeError(f"{option} {path} is a directory; give a file name")
        if stat.S_ISLNK(info.st_mode):
            raise NbscopeError(
                f"{option} {path} is a symbolic link; nbscope replaces only regular files: give the file it points to"
            )
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "a device"
            raise NbscopeError(f"{option} {path} is {kind}, not a regular file; nbscope replaces only regular files")
    parent = path.parent
    if not parent.exists() and not parent.is_symlink():
        raise NbscopeError(f"{option} {path}: the folder {parent} does not exist (make it first)")
    if not parent.is_dir():
        raise NbscopeError(f"{option} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise NbscopeError(f"{option} {path}: the folder {parent} is not writable")
    return path


def _mode_for(path: Path) -> int:
    """The permissions the written file gets: the replaced file's own, else what a new file would get."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path: str | Path, text: str, *, option: str = "-o") -> Path | None:
    """Write ``text`` to ``path`` atomically (see the module's rules); standard output for ``-`` and
    ``/dev/stdout`` (then None is returned). Any problem is one NbscopeError line; the target is then untouched."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    path = check_target(path, option=option)
    mode = _mode_for(path)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".nbscope-tmp", dir=path.parent)
    except OSError as exc:
        raise NbscopeError(f"{option} {path}: cannot write in {path.parent} ({exc.strerror or exc})") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        check_target(path, option=option)  # a link or FIFO put there meanwhile is still refused
        os.replace(temporary, path)
    except BaseException as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise NbscopeError(f"{option} {path}: cannot be written ({exc.strerror or exc})") from None
        raise
    return path


def written_to(path: str | Path | None) -> str:
    """How a confirmation names where the text went."""
    return "standard output" if path is None or is_stdout(path) else str(path)
