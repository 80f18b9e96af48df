"""Writing files safely: output folders checked before work starts, one writer per file, atomic writes and swaps.

Shared by the stages that write (trajectories, dataset builds). Every failure
is an :class:`~themisto.exceptions.OutputError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from themisto.exceptions import OutputError

# Bytes written (and synced) to prove that a folder takes data: a full disk refuses them.
PROBE_BYTES = 65_536
# Fallback when the file system does not say how long a file name may be.
DEFAULT_NAME_MAX = 255


def prepare_output_folder(folder: Path, names: Iterable[str] = ()) -> None:
    """Create ``folder`` if needed and prove that files called ``names`` can be written in it.

    Raises :class:`OutputError` in one line for a folder that is a file, cannot
    be created, is read-only or unwritable, has no free space, or whose file
    system refuses one of ``names`` as too long.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create folder {folder}: {exc.strerror or exc}") from None
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = DEFAULT_NAME_MAX
    for name in names:
        size = len(os.fsencode(name))
        if size > limit:
            shown = name if len(name) <= 60 else name[:40] + "…" + name[-12:]
            raise OutputError(
                f"{folder}: the file name {shown!r} is {size} bytes, longer than this file system allows ({limit})"
            )
    try:
        # an unnamed file where the system has them (O_TMPFILE): a process killed here leaves nothing behind
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(b"\0" * PROBE_BYTES)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        raise OutputError(f"cannot write to {folder}: {exc.strerror or exc}") from None


class ExclusiveLock:
    """An exclusive lock on a lock file (``flock``), held by one process at a time, carrying a short note.

    A second holder gets :class:`OutputError` at once, naming ``what`` is
    locked. The lock goes with the process that holds it, even one killed
    with SIGKILL, so a lock is never stale. The note (a line of text, such as
    the step in progress) is kept in the lock file: the file is removed on
    release while no note is set, and otherwise stays, so a holder that dies
    or fails mid-work leaves its note for the next one (:attr:`left_note`).
    """

    NOTE_BYTES = 128

    def __init__(self, path: Path, what: str) -> None:
        self.path = Path(path)
        self.what = what
        self.left_note: str | None = None  # the note a previous holder left
        self._note: str | None = None
        self._fd = -1

    def __enter__(self) -> ExclusiveLock:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise OutputError(f"cannot create lock file {self.path}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise OutputError(f"{self.what} is being written by another process (lock {self.path})") from None
                raise OutputError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
            try:
                current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)  # the previous holder removed this file after we opened it: lock the new one
        self._fd = fd
        left = os.pread(fd, self.NOTE_BYTES, 0).decode("utf-8", "replace").strip()
        self.left_note = left or None
        self.note(None)  # also reserves the note's bytes, so setting a note later needs no new disk space
        return self

    def note(self, text: str | None) -> None:
        """Set (or with None clear) the note kept in the lock file."""
        data = (text or "").encode("utf-8")[: self.NOTE_BYTES].ljust(self.NOTE_BYTES)
        try:
            os.pwrite(self._fd, data, 0)
        except OSError as exc:
            raise OutputError(f"cannot write lock file {self.path}: {exc.strerror or exc}") from None
        self._note = text

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._note is None:
            try:
                os.unlink(self.path)  # while still locked, so no one locks this file in between
            except OSError:
                pass
        os.close(self._fd)
        self._fd = -1


def partial_path(path: Path) -> Path:
    """The temporary file :func:`write_atomically` writes before it replaces ``path``: ``.<name>.partial``."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def write_atomically(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text as UTF-8) in one step, so a reader never sees half of it.

    The data goes to :func:`partial_path` first, is synced, and then renamed
    over ``path``; a write that fails leaves ``path`` as it was and removes
    the partial file. Raises :class:`OutputError` in one line.
    """
    path = Path(path)
    partial = partial_path(path)
    encoded = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with partial.open("wb") as handle:
            handle.write(encoded)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # the error that matters is the write's
            partial.unlink(missing_ok=True)
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def lock_path(path: Path) -> Path:
    """The lock file that guards ``path``: a hidden sibling, ``.<name>.lock``."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


def exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(error, os.strerror(error), str(second))


def prepare_output_file(path: Path) -> None:
    """Prove that ``path`` can be written (its folder made and writable, the path no folder) before any work."""
    if Path(path).is_dir():
        raise OutputError(f"{path} is a folder, not a file")
    prepare_output_folder(Path(path).parent, [Path(path).name])
