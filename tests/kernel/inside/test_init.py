"""The init of a prediction's PID namespace (``namespaces._spawn_init``), started in-process as its child."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from themisto.kernel.inside import namespaces

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_spawn of cat, /proc")


def test_the_init_holds_only_the_pipe_and_ends_at_its_end() -> None:
    read, write = os.pipe()
    kept = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(kept, True)  # as a notebook may leave one: an exec would keep it
    try:
        pid = namespaces._spawn_init(read)
        os.close(read)
        # posix_spawn returns once the exec has begun, before it has closed the non-inheritable descriptors
        for _ in range(200):
            if (descriptors := set(os.listdir(f"/proc/{pid}/fd"))) == {"0", "1", "2"}:
                break
            time.sleep(0.01)
        assert descriptors == {"0", "1", "2"}  # its input, and /dev/null twice
        assert os.readlink(f"/proc/{pid}/fd/0") == os.readlink(f"/proc/self/fd/{write}")  # the pipe
        with open(f"/proc/{pid}/comm") as comm:
            assert comm.read().strip() == namespaces.INIT_PROGRAM
        os.close(write)  # the process that made the namespace ends: the init ends too
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        os.close(kept)


def test_where_there_is_no_cat_the_init_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces, "_INIT_FOLDERS", (str(tmp_path),))
    read, write = os.pipe()
    try:
        with pytest.raises(OSError, match=f"no cat in {tmp_path} to be the init$"):
            namespaces._spawn_init(read)
    finally:
        os.close(read)
        os.close(write)
