"""bench_build's memory figure holds a build's worker processes, each shared page once."""

from __future__ import annotations

import subprocess
import sys

from repository import bench_module

MIB = 1 << 20
# the parent fills 120 MiB, then forks a child that still shares them and fills 120 MiB of its own
_TREE = """
import os, sys, time
shared = b"s" * (120 << 20)
parent = os.getpid()
if os.fork() == 0:
    own = b"o" * (120 << 20)
    print("ready", flush=True)
    while os.getppid() == parent:  # ends with the parent, which the test kills
        time.sleep(0.05)
    os._exit(0)
time.sleep(60)
"""


def test_tree_memory_counts_a_forked_child_and_its_shared_pages_once() -> None:
    bench_build = bench_module("bench_build")
    parent = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "ready\n"
        held = bench_build.tree_memory(parent.pid)
    finally:
        parent.kill()
        parent.wait()
    # both fills count, the child's own included; the shared one once (summed RSS would count it twice: 480+ MiB)
    assert 240 * MIB <= held <= 330 * MIB, held / MIB
    assert bench_build.tree_memory(parent.pid) == 0  # gone
