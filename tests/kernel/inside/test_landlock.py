"""The Landlock wrapper confines a real process: writes, TCP, signals, abstract sockets and ptrace."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from repository import REPOSITORY

from themisto.kernel.inside import landlock

needs_landlock = pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock ABI >= 6")


def confined(body: str, writable: list[str], **options: object) -> dict[str, object]:
    """Run ``body`` in a fresh interpreter after ``confine(writable, **options)``; the dict it prints as JSON."""
    script = (
        "import json, os, socket, sys\n"
        "from themisto.kernel.inside import landlock\n"
        f"abi = landlock.confine({writable!r}, **{options!r})\n"
        "result = {'abi': abi}\n"
        "def attempt(name, action):\n"
        "    try:\n"
        "        action()\n"
        "        result[name] = 'allowed'\n"
        "    except OSError as exc:\n"
        "        result[name] = type(exc).__name__\n"
        f"{textwrap.dedent(body)}\n"
        "print(json.dumps(result))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_this_kernel_offers_landlock() -> None:
    # The platform the project targets; where the check is false, every guarantee below is void.
    assert landlock.abi_version() >= 1


@needs_landlock
def test_writes_only_beneath_the_writable_paths_reading_stays_free(tmp_path: Path) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "kept.txt").write_text("kept")
    (inside / "moved.txt").write_text("moved")
    body = f"""
attempt('write_inside', lambda: open({str(inside / "new.txt")!r}, 'w').write('x'))
attempt('mkdir_inside', lambda: os.mkdir({str(inside / "sub")!r}))
attempt('read_outside', lambda: open({str(outside / "kept.txt")!r}).read())
attempt('write_outside', lambda: open({str(outside / "new.txt")!r}, 'w'))
attempt('append_outside', lambda: open({str(outside / "kept.txt")!r}, 'a'))
attempt('delete_outside', lambda: os.remove({str(outside / "kept.txt")!r}))
attempt('rename_out', lambda: os.rename({str(inside / "moved.txt")!r}, {str(outside / "moved.txt")!r}))
attempt('truncate_outside', lambda: os.truncate({str(outside / "kept.txt")!r}, 0))
attempt('dev_null', lambda: open('/dev/null', 'w').write('x'))
"""
    result = confined(body, [str(inside), "/dev/null", str(tmp_path / "missing")])
    assert result["abi"] == landlock.abi_version()
    assert result["write_inside"] == result["mkdir_inside"] == result["read_outside"] == "allowed"
    assert result["dev_null"] == "allowed"
    for attack in ("write_outside", "append_outside", "delete_outside", "rename_out", "truncate_outside"):
        assert result[attack] == "PermissionError", attack
    assert (outside / "kept.txt").read_text() == "kept"
    assert (inside / "new.txt").read_text() == "x"


@needs_landlock
def test_tcp_is_refused_unless_allowed_and_bind_only_on_named_ports(tmp_path: Path) -> None:
    with socket.socket() as listener, socket.socket() as free:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        free.bind(("127.0.0.1", 0))
        port, named = listener.getsockname()[1], free.getsockname()[1]
        free.close()  # the port the domain may bind
        body = f"""
attempt('connect', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=5))
attempt('bind_any', lambda: socket.socket().bind(('127.0.0.1', 0)))
attempt('bind_named', lambda: socket.socket().bind(('127.0.0.1', {named})))
"""
        denied = confined(body, [str(tmp_path)], bind_ports=[named])
        allowed = confined(body, [str(tmp_path)], allow_network=True)
    assert denied["connect"] == denied["bind_any"] == "PermissionError"
    assert denied["bind_named"] == "allowed"
    assert allowed["connect"] == allowed["bind_any"] == "allowed"


@needs_landlock
def test_signals_and_abstract_sockets_stop_at_the_domain(tmp_path: Path) -> None:
    name = f"\0themisto-landlock-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(name)
        listener.listen()
        body = f"""
import signal, subprocess, time
attempt('signal_parent', lambda: os.kill(os.getppid(), 0))
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
attempt('signal_own_child', lambda: os.kill(child.pid, signal.SIGKILL))
child.wait()
attempt('abstract_socket', lambda: socket.socket(socket.AF_UNIX).connect({name!r}))
attempt('parent_memory', lambda: open(f'/proc/{{os.getppid()}}/mem', 'rb'))
"""
        scoped = confined(body, [str(tmp_path)])
        unscoped = confined(body, [str(tmp_path)], scope=False)
    assert scoped["signal_parent"] == scoped["abstract_socket"] == "PermissionError"
    assert scoped["signal_own_child"] == "allowed"
    assert scoped["parent_memory"] == unscoped["parent_memory"] == "PermissionError"
    assert unscoped["signal_parent"] == unscoped["abstract_socket"] == "allowed"


def test_a_parent_outside_any_domain_can_read_its_childs_memory_so_the_refusal_above_is_landlocks() -> None:
    # Without a domain, the same read of a same-user process succeeds: the PermissionError above is not DAC's.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with open(f"/proc/{child.pid}/mem", "rb"):
            pass
    finally:
        child.kill()
        child.wait()


def test_the_domain_is_inherited_and_cannot_be_left(tmp_path: Path) -> None:
    if landlock.abi_version() < 1:
        pytest.skip("needs Landlock")
    target = tmp_path / "outside.txt"
    body = f"""
import subprocess
child = subprocess.run([sys.executable, '-c', {f"open({str(target)!r}, 'w')"!r}], capture_output=True, text=True)
result['child'] = 'PermissionError' if 'PermissionError' in child.stderr else child.stderr
attempt('confine_again_wider', lambda: landlock.confine(['/']))
attempt('write_after', lambda: open({str(target)!r}, 'w'))
"""
    result = confined(body, [str(tmp_path / "nowhere")])
    assert result["child"] == "PermissionError"
    # a second domain only narrows: writing '/' is allowed by it, and still refused by the first
    assert result["confine_again_wider"] == "allowed"
    assert result["write_after"] == "PermissionError"
    assert not target.exists()
