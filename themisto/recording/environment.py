"""The untrusted kernel's process: its environment without credentials, its kernel spec and its limits."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError

# Environment variables whose name contains one of these words (split on anything but letters and
# digits) are credentials and never reach the kernel: AWS_SECRET_ACCESS_KEY, HF_TOKEN, GITHUB_PAT, ...
# Whole words only, so PATH (not PAT) and OLDPWD (not PWD) pass.
CREDENTIAL_WORDS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "PWD",
        "PAT",
        "DSN",
        "WEBHOOK",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "OAUTH",
        "COOKIE",
        "PRIVATE",
    }
)
# Words that are credentials even inside a longer word (GITHUBTOKEN, DBPASSWORD, SLACKWEBHOOK).
CREDENTIAL_FRAGMENTS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "APIKEY",
    "CREDENTIAL",
    "WEBHOOK",
    "CONNECTION_STRING",
    "CONNECTIONSTRING",
)
# Names that contain a credential word but are not secrets: the shell's working directory.
NOT_CREDENTIALS = frozenset({"PWD"})
# A URL carrying a password (scheme://user:password@host), anywhere in a value: PIP_INDEX_URL,
# DATABASE_URL, a list of index URLs ...
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:[^\s/@]*@")


def is_credential(name: str, value: str = "") -> bool:
    """Whether an environment variable looks like it holds a secret, by its name or its value."""
    upper = name.upper()
    if upper in NOT_CREDENTIALS:
        return False
    words = set(re.split(r"[^A-Z0-9]+", upper))
    named = bool(words & CREDENTIAL_WORDS) or any(fragment in upper for fragment in CREDENTIAL_FRAGMENTS)
    return named or _URL_PASSWORD.search(value) is not None


def kernel_environment(environ: Mapping[str, str], home: Path | None = None) -> dict[str, str]:
    """The recording process's environment without credentials, for the untrusted kernel.

    With ``home``, the kernel's ``HOME`` is that folder and the XDG base folders are
    unset, so files found through the home folder (``~/.netrc``, ``~/.cache/huggingface/token``,
    ``~/.aws/credentials``) are not where the kernel looks.
    """
    kept = {name: value for name, value in environ.items() if not is_credential(name, value)}
    if home is not None:
        kept = {name: value for name, value in kept.items() if name not in HOME_VARIABLES}
        kept["HOME"] = str(home)
    return kept


def has_credentials(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` holds any variable :func:`kernel_environment` would remove."""
    return any(is_credential(name, value) for name, value in environ.items())


# Variables that point into the user's home folder; unset when the kernel gets a home of its own.
HOME_VARIABLES = frozenset(
    {"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "HF_HOME"}
)


# --- the recording process, seen from the kernel -------------------------------------------------
#
# A same-user process can read another's environment in /proc/<pid>/environ (and its memory,
# through ptrace or /proc/<pid>/mem) unless that process is not dumpable. While a kernel runs, the
# process that started it is marked not dumpable, so the kernel cannot read the caller's
# environment, including the credentials kernel_environment() kept from it. Linux only.

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_dumpable_lock = threading.Lock()
_dumpable_holders = 0
_dumpable_before = 1


def _prctl(option: int, value: int = 0) -> int:
    """``prctl(option, value)``; -1 where there is no prctl (not Linux)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return -1


@contextlib.contextmanager
def undumpable() -> Iterator[None]:
    """Keep this process not dumpable while the block runs; nested and concurrent uses are counted."""
    global _dumpable_holders, _dumpable_before
    with _dumpable_lock:
        if _dumpable_holders == 0 and sys.platform.startswith("linux"):
            _dumpable_before = _prctl(_PR_GET_DUMPABLE)
            _prctl(_PR_SET_DUMPABLE, 0)
        _dumpable_holders += 1
    try:
        yield
    finally:
        with _dumpable_lock:
            _dumpable_holders -= 1
            if _dumpable_holders == 0 and _dumpable_before > 0:
                _prctl(_PR_SET_DUMPABLE, _dumpable_before)


def kernel_specs() -> Any:
    """A kernel spec manager on which ``python3`` is always this interpreter's ipykernel.

    A ``python3`` kernel.json in a user's Jupyter folder may point at another
    Python; the recorder must run the environment it is installed in, so CI on
    a fresh machine and a developer's laptop record with the same packages.
    """
    from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpecManager

    class InterpreterKernelSpecs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> Any:
            if kernel_name == NATIVE_KERNEL_NAME:
                from ipykernel.kernelspec import RESOURCES, get_kernel_dict

                return self.kernel_spec_class(resource_dir=RESOURCES, **get_kernel_dict())
            return super().get_kernel_spec(kernel_name)

    return InterpreterKernelSpecs()


# Seconds the launcher gets to kill the kernel's descendants when asked to stop, before SIGKILL.
LAUNCHER_STOP_TIMEOUT = 5.0


def supervised_kernel_manager(kernel_name: str, max_memory: int | None, max_cpu_seconds: int | None) -> Any:
    """A kernel manager for ``kernel_name`` whose kernel (and its restarts) runs under the launcher.

    The launcher (:mod:`themisto.recording.launcher`) applies the limits and
    kills every process the kernel started when the kernel is shut down.
    """
    from jupyter_client.manager import KernelManager

    from themisto.recording.launcher import launcher_command

    class SupervisedKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            command = super().format_kernel_cmd(extra_arguments)
            return launcher_command(command, max_memory, max_cpu_seconds)

        async def _async_kill_kernel(self, restart: bool = False) -> None:
            # jupyter_client kills the kernel's process group, which misses processes the notebook
            # started in a session of their own; the launcher, asked with SIGTERM, kills them all
            await _stop_launcher(getattr(self.provisioner, "process", None))
            await super()._async_kill_kernel(restart=restart)

    if os.name != "posix":  # no ipc transport on Windows
        return SupervisedKernelManager(kernel_name=kernel_name, kernel_spec_manager=kernel_specs())
    # Unix sockets in a private folder (mode 0700) rather than TCP ports on localhost: no port
    # another local user could connect to, and no "Kernel is running over TCP without encryption"
    # warning from every kernel. The path is absolute: the kernel runs in another directory.
    sockets = tempfile.mkdtemp(prefix="themisto-kernel-")
    manager = SupervisedKernelManager(
        kernel_name=kernel_name,
        kernel_spec_manager=kernel_specs(),
        transport="ipc",
        ip=os.path.join(sockets, "kernel"),
    )
    weakref.finalize(manager, shutil.rmtree, sockets, True)  # the folder goes with its manager
    return manager


async def _stop_launcher(process: Any) -> None:
    """Send the launcher SIGTERM and wait (up to LAUNCHER_STOP_TIMEOUT) until it has cleaned up and exited."""
    import asyncio
    import signal
    import time

    if process is None or process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + LAUNCHER_STOP_TIMEOUT
    while process.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def check_kernel(name: str) -> None:
    """Raise :class:`InputError` unless a Jupyter kernel spec called ``name`` is installed."""
    from jupyter_client.kernelspec import NoSuchKernel

    manager = kernel_specs()
    try:
        manager.get_kernel_spec(name)
    except NoSuchKernel:
        known = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise InputError(f"unknown kernel {name!r} (installed: {known})") from None
