"""The private copy of a working folder (``fork.copy_tree``): what it keeps, what it leaves out, what it refuses."""

from __future__ import annotations

import os
import signal
import socket
import stat
from pathlib import Path

import pytest

from themisto.kernel.inside.fork import clone_file, copy_tree

MTIME_NS = 1_600_000_000_123_456_789


def _stamp(path: Path, offset: int) -> None:
    os.utime(path, ns=(MTIME_NS, MTIME_NS + offset), follow_symlinks=False)


def _source(root: Path) -> Path:
    """A folder with what notebooks leave in theirs: nested folders, modes, times, links, a FIFO and a socket."""
    source = root / "source"
    (source / "data" / "deep").mkdir(parents=True)
    (source / "data" / "table.csv").write_text("a,b\n1,2\n")
    (source / "data" / "deep" / "big.bin").write_bytes(os.urandom(3 << 20) + b"end")  # past one 1 MiB chunk
    (source / "empty.txt").write_bytes(b"")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o751)
    (source / "data" / "table.csv").chmod(0o640)
    (source / "link.csv").symlink_to("data/table.csv")
    (source / "dangling").symlink_to("no/such/file")
    (source / "outside").symlink_to("/etc/hostname")
    (source / "folder-link").symlink_to("data")
    os.mkfifo(source / "fifo")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(source / "socket"))
    (source / "read-only").mkdir()
    (source / "read-only" / "kept.txt").write_text("kept")
    for offset, path in enumerate(sorted(source.rglob("*"), reverse=True)):  # children before their folders
        _stamp(path, offset)
    (source / "read-only").chmod(0o555)
    (source / "data").chmod(0o750)
    return source


def _listing(root: Path) -> dict[str, tuple[str, int, int, bytes | str]]:
    """Every entry under ``root``: its type, mode, modification time and content (a link's target). Access times
    are left out: reading the source for the comparison moves them."""
    entries: dict[str, tuple[str, int, int, bytes | str]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content: bytes | str
        if path.is_symlink():
            kind, content = "link", os.readlink(path)
        elif path.is_dir():
            kind, content = "folder", b""
        elif path.is_file():
            kind, content = "file", path.read_bytes()
        else:  # a FIFO or a socket: reading a FIFO would block
            kind, content = "other", b""
        entries[str(path.relative_to(root))] = (kind, stat.S_IMODE(info.st_mode), info.st_mtime_ns, content)
    return entries


def test_files_folders_and_links_are_copied_with_their_modes_and_times_and_nothing_else(tmp_path: Path) -> None:
    source = _source(tmp_path)
    expected = {name: entry for name, entry in _listing(source).items() if name not in ("fifo", "socket")}
    try:
        copy_tree(str(source), str(tmp_path / "copy" / "work"))
        copied = _listing(tmp_path / "copy" / "work")
    finally:
        (source / "read-only").chmod(0o755)
        (tmp_path / "copy" / "work" / "read-only").chmod(0o755)
    assert copied == expected
    # the links are links in the copy, not what they point to; the FIFO and the socket are left out
    assert (tmp_path / "copy" / "work" / "folder-link").is_symlink()
    assert not (tmp_path / "copy" / "work" / "fifo").exists() and not (tmp_path / "copy" / "work" / "socket").exists()
    top = (tmp_path / "copy" / "work").stat()
    assert (stat.S_IMODE(top.st_mode), top.st_mtime_ns) == (
        stat.S_IMODE(source.stat().st_mode),
        source.stat().st_mtime_ns,
    )


def test_a_copy_is_a_copy_and_the_source_stays_as_it_was(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "table.csv").write_text("original")
    before = _listing(source)
    copy_tree(str(source), str(tmp_path / "copy"))
    (tmp_path / "copy" / "table.csv").write_text("changed by a prediction")
    (tmp_path / "copy" / "new.txt").write_text("new")
    assert _listing(source) == before


def test_an_existing_entry_of_the_target_is_refused_and_never_written_through(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "table.csv").write_text("from the source")
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    target = tmp_path / "copy"
    target.mkdir()
    (target / "table.csv").symlink_to(victim)
    with pytest.raises(FileExistsError):
        copy_tree(str(source), str(target))
    assert victim.read_text() == "mine"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no tmpfs at /dev/shm")
def test_a_copy_across_filesystems_is_whole(tmp_path: Path) -> None:
    # copy_file_range refuses to cross filesystems (EXDEV): the copy goes on with reads and writes
    content = os.urandom((2 << 20) + 5)
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "big.bin").write_bytes(content)
    target = Path("/dev/shm") / f"themisto-copy-test-{os.getpid()}"
    try:
        copy_tree(str(tmp_path / "source"), str(target))
        assert (target / "big.bin").read_bytes() == content
    finally:
        for path in target.glob("*"):
            path.unlink()
        if target.exists():
            target.rmdir()


def test_a_fifo_put_in_a_files_place_after_its_listing_is_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "table.csv").write_text("x")
    listed = (tmp_path / "table.csv").lstat()  # what the walk saw
    (tmp_path / "table.csv").unlink()
    os.mkfifo(tmp_path / "table.csv")  # no writer ever opens it: a blocking open would never return
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the copy waited on the FIFO"))
    signal.alarm(10)
    try:
        clone_file(str(tmp_path / "table.csv"), str(tmp_path / "copy.csv"), listed)
    finally:
        signal.alarm(0)
    assert (tmp_path / "copy.csv").read_bytes() == b""
