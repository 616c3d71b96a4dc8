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
- A target is never a file this process reads: the run store (and its ``-wal``/``-shm`` files), a record
  being imported or merged, a notebook being audited. Every reader notes its file with :func:`note_input`;
  the target is compared with each by resolved path and by device and inode, so a hard link, a symbolic
  link in the folder path or another spelling (``./x/../nbscope.db``) is caught too.

Reading the user's files, the one bounded reader for every file a user names (a record, an import, a merge or
shard, a device table, a fingerprint, a requirements file, a book's configuration, a notebook):
:func:`read_bounded` (:func:`read_text`, :func:`read_json`) reads only a regular file (a FIFO or a device would
block or never end), at most :data:`READ_LIMIT` bytes, checked with ``os.stat`` before opening and again on the
open descriptor (opened non-blocking, so a FIFO put there meanwhile cannot hang the command);
:func:`parse_nested` refuses JSON, TOML or YAML nested deeper than :data:`MAX_DEPTH` or larger, as a tree,
than :data:`MAX_ITEMS`; :func:`check_store_path` refuses a ``--db`` that SQLite must not open. Each refusal is
one line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbscope._errors import NbscopeError
from nbscope._redact import shorten

STDOUT_NAMES = ("-", "/dev/stdout")
# The largest file nbscope reads as a record (an exported run is a few MiB even with every program).
READ_LIMIT = 64 * 2**20

# Files this process reads (resolved path, device, inode): never a target of -o (see the module).
_inputs: list[tuple[str, int, int, str]] = []


def note_input(path: str | Path, what: str = "an input", *, transient: bool = False) -> None:
    """Remember that this process reads ``path`` (a store, a record, a notebook): :func:`check_target`
    then refuses to write over it. A path that does not exist yet is remembered by name.

    A ``transient`` file (SQLite's ``-wal``/``-shm``/``-journal``) is remembered by name only: SQLite deletes
    and remakes it, and the inode it had may meanwhile be given to a new file of the user's (CI saw a fresh
    ``-o`` file refused as the store's old ``-shm``). Its current inode is compared when a target is checked."""
    path = Path(path)
    if is_stdout(path):
        return
    device, inode = (None if transient else _identity_now(path)) or (-1, -1)
    identity = (os.path.realpath(path), device, inode, what)
    if identity not in _inputs:
        _inputs.append(identity)


# Folders whose files this process reads as a whole (an audited book): a file in them is never replaced,
# unless nbscope wrote it (an earlier report or record, by its first bytes).
_input_folders: list[tuple[str, str]] = []


def note_input_folder(folder: str | Path, what: str) -> None:
    """Remember that this process reads the files of ``folder`` (a book): :func:`check_target` then refuses to
    replace any file in it (its configuration, pages, bibliography) that nbscope did not write."""
    entry = (os.path.realpath(folder), what)
    if entry not in _input_folders:
        _input_folders.append(entry)


def machine_limit(exc: BaseException) -> NbscopeError | None:
    """A write that the machine refused, named as such (not blamed on a store or a notebook): the file size limit
    (``ulimit -f``: EFBIG), a full disk (ENOSPC), a read-only mount (EROFS); None for any other error."""
    import errno
    import resource

    if not isinstance(exc, OSError) or exc.errno not in (errno.EFBIG, errno.ENOSPC, errno.EROFS):
        return None
    where = exc.filename2 or exc.filename
    what = f"writing {where}" if where else "writing its output"
    if exc.errno == errno.EFBIG:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        shown = f" ({limit // 1024} KiB)" if limit != resource.RLIM_INFINITY else ""
        return NbscopeError(
            f"this shell's file size limit{shown} stopped nbscope {what}: raise it (ulimit -f unlimited)"
        )
    if exc.errno == errno.ENOSPC:
        return NbscopeError(f"the disk is full: nbscope stopped {what}; free some space and run again")
    return NbscopeError(f"the file system is mounted read-only: nbscope stopped {what}")


def forget_inputs() -> None:
    """Start a new command: no file is noted as read (the command line calls this once per command)."""
    _inputs.clear()
    _input_folders.clear()


def _nbscope_wrote(path: Path) -> bool:
    """Whether the regular file ``path`` is one of nbscope's outputs (a record's JSON, an HTML report)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return b'"format": "nbscope-' in head[:200] or (head.startswith(b"<!DOCTYPE html>") and b"nbscope" in head)


def _in_input_folder(path: Path) -> str | None:
    """What the noted folder holding the existing file ``path`` is, unless nbscope wrote the file."""
    if not _input_folders or not os.path.isfile(path):
        return None
    resolved = os.path.realpath(path)
    for folder, what in _input_folders:
        if resolved.startswith(folder.rstrip(os.sep) + os.sep) and not _nbscope_wrote(Path(resolved)):
            return what
    return None


def _read_by_this_process(path: Path) -> tuple[str, str] | None:
    """The noted input ``path`` is (by name or by device and inode), and what it is, if any."""
    resolved = os.path.realpath(path)
    key = _identity_now(path)
    for name, device, inode, what in _inputs:
        if name == resolved or (key is not None and key == (device, inode)):
            return name, what
        if key is not None and device == -1 and key == _identity_now(name):
            return name, what  # a hard link to a file noted by name (made since, or transient)
    return None


def _identity_now(name: str | Path) -> tuple[int, int] | None:
    try:
        info = os.stat(name)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def read_bounded(path: str | Path, *, limit: int = READ_LIMIT, what: str = "file", note: bool = True) -> bytes:
    """The bytes of the regular file ``path``, refused in one line when it is not a regular file (a FIFO,
    a device, a folder), is larger than ``limit``, or cannot be read. ``path`` is noted as read (unless ``note``
    is False: a file the command itself replaces, such as a site's manifest)."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise NbscopeError(f"{path}: no such file") from None
    except OSError as exc:
        raise NbscopeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    _refuse_irregular(path, info.st_mode, what)
    if info.st_size > limit:
        raise NbscopeError(
            f"{path} is {info.st_size / 2**20:.0f} MiB; a {what} is read only up to {limit // 2**20} MiB"
        )
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise NbscopeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        _refuse_irregular(path, os.fstat(handle).st_mode, what)  # swapped for a FIFO since the check
        if note:
            note_input(path, f"a {what} it reads")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(handle, min(2**20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise NbscopeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(handle)
    if size > limit:  # it grew since the check
        raise NbscopeError(f"{path} is larger than {limit // 2**20} MiB; a {what} is read only up to that")
    return b"".join(chunks)


def read_text(path: str | Path, *, what: str = "file", limit: int = READ_LIMIT, note: bool = True) -> str:
    """The text of the regular file ``path`` (:func:`read_bounded`), refused in one line when it is not UTF-8."""
    data = read_bounded(path, limit=limit, what=what, note=note)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NbscopeError(f"{path}: not UTF-8 text (byte {exc.start}); a {what} is UTF-8") from None


# How deep a file's JSON, TOML or YAML may nest (the deepest nbscope writes is under 20 levels): a deeper one is
# refused in one line, never read into a RecursionError by whatever walks it next.
MAX_DEPTH = 100
MAX_ITEMS = 1_000_000


def parse_nested(text: str, parse: Callable[[str], Any], *, path: str | Path, what: str, form: str) -> Any:
    """``parse(text)`` (``json.loads``, ``tomllib.loads``, a YAML loader), refused in one line when it is not
    valid ``form`` or nests deeper than :data:`MAX_DEPTH` (checked without recursion)."""
    too_deep = False
    try:
        value = parse(text)
    except RecursionError:
        value, too_deep = None, True
    except Exception as exc:
        # JSONDecodeError, TOMLDecodeError, a number of thousands of digits; a YAML parser's own errors
        if not isinstance(exc, (ValueError, TypeError)) and type(exc).__module__.split(".")[0] != "yaml":
            raise
        raise NbscopeError(
            f"{path}: not valid {form} ({shorten(' '.join(str(exc).split()), 200)}); not a {what}"
        ) from None
    if too_deep or not _shallow(value):
        raise NbscopeError(
            f"{path}: nested deeper than {MAX_DEPTH} levels or more than {MAX_ITEMS:,} entries in all; not a {what}"
        )
    return value


def _containers(item: object) -> list[object]:
    children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
    return [child for child in children if isinstance(child, (dict, list))]


def _shallow(value: object) -> bool:
    """Whether ``value`` nests at most :data:`MAX_DEPTH` deep and, read as a tree, holds at most
    :data:`MAX_ITEMS` containers: a YAML alias shares one object among many places (a "billion laughs" file
    is a few lines), so each object is walked once per depth it is reached at, never once per place."""
    deepest: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False  # a cycle too (a YAML anchor inside itself)
        if id(item) in deepest and deepest[id(item)] >= depth:
            continue
        deepest[id(item)] = depth
        stack.extend((child, depth + 1) for child in _containers(item))
    sizes: dict[int, int] = {}  # containers under each, counted as a tree
    walk: list[tuple[object, bool]] = [(value, False)]
    while walk:
        item, children_done = walk.pop()
        if id(item) in sizes:
            continue
        if not children_done:
            walk.append((item, True))
            walk.extend((child, False) for child in _containers(item) if id(child) not in sizes)
            continue
        sizes[id(item)] = 1 + sum(sizes[id(child)] for child in _containers(item))
        if sizes[id(item)] > MAX_ITEMS:
            return False
    return True


def read_json(path: str | Path, *, what: str = "JSON file", limit: int = READ_LIMIT) -> Any:
    """The JSON document in the regular file ``path``: :func:`read_text`, then :func:`parse_nested`."""
    import json

    return parse_nested(read_text(path, what=what, limit=limit), json.loads, path=path, what=what, form="JSON")


def check_store_path(path: str | Path, *, option: str = "--db") -> None:
    """Refuse, in one line, a database path SQLite must not open: one that is there and is not a regular file
    (a device, a FIFO: SQLite would block on it or make its journal beside it), or one in the folders of
    devices and processes (``/dev``, ``/proc``, ``/sys``), which are no one's to fill."""
    path = Path(path)
    folder = os.path.realpath(path.parent)
    if any(folder == root or folder.startswith(root + os.sep) for root in ("/dev", "/proc", "/sys")):
        raise NbscopeError(f"{option} {path}: {folder} holds devices and processes, not files; give a file elsewhere")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode):
        raise NbscopeError(f"{option} {path} is a directory, not a database file")
    if not stat.S_ISREG(mode):
        raise NbscopeError(f"{option} {path} is {_kind(mode)}, not a regular file; a run store is a regular file")


def _kind(mode: int) -> str:
    """What a file that is not a regular one is."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a socket" if stat.S_ISSOCK(mode) else "a device"


def _refuse_irregular(path: Path, mode: int, what: str) -> None:
    if not stat.S_ISREG(mode):
        raise NbscopeError(
            f"{path}: cannot read: it is {_kind(mode)}, not a regular file (a {what} is read only from one)"
        )


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
            raise NbscopeError(
                f"{option} {path} is {_kind(info.st_mode)}, not a regular file; nbscope replaces only regular files"
            )
    refuse_input(path, option=option)
    parent = path.parent
    if not parent.exists() and not parent.is_symlink():
        raise NbscopeError(f"{option} {path}: the folder {parent} does not exist (make it first)")
    if not parent.is_dir():
        raise NbscopeError(f"{option} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise NbscopeError(f"{option} {path}: the folder {parent} is not writable")
    return path


def refuse_input(path: str | Path, *, option: str = "-o") -> None:
    """Refuse, in one line, a file this command reads (:func:`note_input`: the run store, an input) as the
    target of ``option``; also for an option that appends (``--summary``) rather than replaces."""
    read = _read_by_this_process(Path(path))
    if read is None and (folder := _in_input_folder(Path(path))) is not None:
        read = os.path.realpath(path), f"a file of {folder}"
    if read is not None:
        name, what = read
        shown = "" if name == os.path.realpath(path) else f" (the same file as {name})"
        raise NbscopeError(f"{option} {path}{shown} is {what}; nbscope never writes over it: give another file name")


def _mode_for(path: Path) -> int:
    """The permissions the written file gets: the replaced file's own, else what a new file would get."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path: str | Path, text: str, *, option: str = "-o", sync: bool = True) -> Path | None:
    """Write ``text`` to ``path`` atomically (see the module's rules); standard output for ``-`` and
    ``/dev/stdout`` (then None is returned). Any problem is one NbscopeError line; the target is then untouched.
    Credentials are redacted (:func:`nbscope._redact.redact`): a report or export of a record read from a file
    shows none either. ``sync=False``: not forced to the disk (a site's many pages, made again by the next
    publish)."""
    from nbscope._redact import redact

    text = redact(text)
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
            if sync:
                os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        check_target(path, option=option)  # a link or FIFO put there meanwhile is still refused
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise NbscopeError(f"{option} {path}: cannot be written ({exc.strerror or exc})") from None
        raise
    return path


def written_to(path: str | Path | None) -> str:
    """How a confirmation names where the text went."""
    return "standard output" if path is None or is_stdout(path) else str(path)
