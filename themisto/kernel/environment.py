"""The untrusted kernel's process: its environment by allowlist, its private folders, sandbox, kernel spec, limits."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto.exceptions import InputError, OptionError
from themisto.kernel.inside import landlock, namespaces
from themisto.kernel.inside.wire import Sandbox

if TYPE_CHECKING:
    from themisto.kernel.options import KernelOptions

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


def kernel_environment(environ: Mapping[str, str], keep: Collection[str] = ()) -> dict[str, str]:
    """The recording process's own environment without credentials (but those named in ``keep``).

    The commands that start kernels re-execute themselves in it, so no process above a kernel holds a
    credential it could read; the kernel itself gets far less (:func:`allowed_environment`).
    """
    return {name: value for name, value in environ.items() if name in keep or not is_credential(name, value)}


def has_credentials(environ: Mapping[str, str], keep: Collection[str] = ()) -> bool:
    """Whether ``environ`` holds any variable :func:`kernel_environment` would remove."""
    return any(name not in keep and is_credential(name, value) for name, value in environ.items())


# The only variables a kernel receives from the recorder's environment (plus those named by --pass-env):
# where programs and the locale are, the hash seed and thread counts that make a run reproducible, the
# Python environment, the plotting backend and GPUs. Every other variable is absent, whatever its name.
KERNEL_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "COLORTERM",
        "NO_COLOR",
        "PYTHONHASHSEED",
        "PYTHONPATH",
        "PYTHONUTF8",
        "PYTHONIOENCODING",
        "PYTHONWARNINGS",
        "PYTHONDONTWRITEBYTECODE",
        "PYDEVD_DISABLE_FILE_VALIDATION",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "LD_LIBRARY_PATH",
        "MPLBACKEND",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "NUMEXPR_MAX_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "BLIS_NUM_THREADS",
        "NUMBA_NUM_THREADS",
        "RAYON_NUM_THREADS",
        "POLARS_MAX_THREADS",
        "TOKENIZERS_PARALLELISM",
        "CUDA_VISIBLE_DEVICES",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    }
)
KERNEL_VARIABLE_PREFIXES = ("LC_", "JUPYTER_")


def allowed_environment(
    environ: Mapping[str, str], pass_env: Collection[str] = (), private: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The kernel's environment: the allowlisted variables of ``environ``, those in ``pass_env``, then ``private``.

    An allowlisted variable that still looks like a credential (``JUPYTER_TOKEN``, a URL with a password) is
    left out; a variable named in ``pass_env`` is passed as it is (the user asked for it). ``private`` (the
    kernel's own folders, see :func:`private_folders`) comes last and wins.
    """
    kept = {
        name: value
        for name, value in environ.items()
        if (name in KERNEL_VARIABLES or name.startswith(KERNEL_VARIABLE_PREFIXES)) and not is_credential(name, value)
    }
    kept.update({name: environ[name] for name in pass_env if name in environ})
    kept.update(private or {})
    return kept


# The kernel's private folders (beneath one root the sandbox lets it write), and the variables that point
# programs there: the temporary folder, caches, IPython's profile and history, matplotlib's config and cache,
# Jupyter's runtime files; with isolate_home, HOME too.
PRIVATE_FOLDERS = {
    "TMPDIR": "tmp",
    "TEMP": "tmp",
    "TMP": "tmp",
    "XDG_CACHE_HOME": "cache",
    "XDG_STATE_HOME": "state",
    "XDG_RUNTIME_DIR": "runtime",
    "JUPYTER_RUNTIME_DIR": "runtime",
    "IPYTHONDIR": "ipython",
    "MPLCONFIGDIR": "matplotlib",
}


def private_folders(root: Path, isolate_home: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """Make the kernel's private folders beneath ``root``; the variables that point to them.

    matplotlib's font list, built once per user, is copied from the user's cache (``environ`` says where), so
    a kernel does not spend a second building it again in its empty folder.
    """
    folders = dict(PRIVATE_FOLDERS, **({"HOME": "home"} if isolate_home else {}))
    variables = {name: str(root / folder) for name, folder in folders.items()}
    for path in set(variables.values()):
        os.makedirs(path, mode=0o700, exist_ok=True)
    home = environ.get("HOME", os.path.expanduser("~"))
    cache = environ.get("MPLCONFIGDIR") or os.path.join(environ.get("XDG_CACHE_HOME", f"{home}/.cache"), "matplotlib")
    for fonts in glob.glob(os.path.join(glob.escape(cache), "fontlist-*.json")):
        with contextlib.suppress(OSError):
            shutil.copy(fonts, variables["MPLCONFIGDIR"])
    return variables


# Devices a kernel may open for writing in the sandbox: the null and random devices, shared memory (POSIX
# semaphores and shm_open, which multiprocessing, joblib and PyTorch use), pseudo-terminals (IPython runs
# `!command` lines in one), GPUs.
WRITABLE_DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/shm",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/dri",
)
GPU_DEVICES = "/dev/nvidia*"


# The Landlock ABI each use of the sandbox needs: a kernel's, any (1); a forked prediction's, 6, the first
# that scopes signals and abstract unix sockets, so the prediction reaches neither its kernel nor the scorer.
KERNEL_ABI = 1
FORK_ABI = 6
_NEEDED_BY = {KERNEL_ABI: "the kernels' sandbox", FORK_ABI: "a prediction's sandbox (scoped signals)"}


@dataclass(frozen=True)
class KernelSandbox:
    """How a kernel is confined, decided and checked once from its options; the provenance says it as it is.

    The one object from the options to ``confine``: its :meth:`domain` is the wire record the launcher enters
    (:class:`~themisto.kernel.inside.wire.Sandbox`), and a forked prediction is confined when it is.
    """

    abi: int  # the Landlock ABI in force; 0: unconfined
    allow_network: bool

    @classmethod
    def of(cls, options: KernelOptions, needs: int = KERNEL_ABI) -> KernelSandbox:
        """The sandbox ``options`` ask for, needing ABI ``needs``; :class:`OptionError` where this system lacks it."""
        if not options.sandbox:
            return cls(0, options.allow_network)
        abi = landlock.abi_version()
        if abi < needs:
            raise OptionError(
                "this system {offers}, and {what} needs Landlock ABI {needs} or later (Linux 5.13 or later, with"
                " Landlock enabled): run unconfined with {sandbox:False}, knowing what the sandbox keeps from the"
                " notebook's code (see SECURITY.md)",
                offers="has no Landlock" if abi < 1 else f"offers Landlock ABI {abi}",
                what=_NEEDED_BY.get(needs, "the sandbox"),
                needs=needs,
            )
        reason = namespaces.unavailable()
        if reason is not None:
            raise OptionError(
                "this system does not let a kernel have user, network and PID namespaces and a /proc of its own"
                " ({reason}), which keep the notebook's kernels off the network, without capabilities and out of"
                " sight of other processes: run unconfined with {sandbox:False}, knowing what the sandbox keeps"
                " from the notebook's code (see SECURITY.md)",
                reason=reason,
            )
        return cls(abi, options.allow_network)

    @property
    def confined(self) -> bool:
        return self.abi > 0

    @property
    def provenance(self) -> str:
        """What the provenance says of it: ``landlock-abi-N`` (``+network``), or ``none``."""
        if not self.confined:
            return "none"
        return f"landlock-abi-{self.abi}" + ("+network" if self.allow_network else "")

    def domain(self, writable: Collection[Path]) -> Sandbox | None:
        """The domain of a kernel that may write beneath ``writable`` (and to the devices it needs); None: none."""
        if not self.confined:
            return None
        paths = [str(Path(path).resolve()) for path in writable] + list(WRITABLE_DEVICES)
        return Sandbox(paths + sorted(glob.glob(GPU_DEVICES)), self.allow_network, [])


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


def supervised_kernel_manager(
    kernel_name: str,
    max_memory: int | None,
    max_cpu_seconds: int | None,
    *,
    sandbox: Sandbox | None,
    transport: str = "ipc",
) -> Any:
    """A kernel manager for ``kernel_name`` whose kernel (and its restarts) runs under the launcher.

    The launcher (:mod:`themisto.kernel.launcher`) applies the limits, confines the kernel to
    ``sandbox`` (None: unconfined) and kills every process the kernel started when the kernel is shut
    down. Over ``ipc`` (the default) the sandbox may write the socket folder; over ``tcp`` it may bind
    the kernel's own five ports and no other, so a process that enters a domain of its own inside it (a
    forked prediction) reaches the kernel's sockets neither by path nor by port.
    """
    from jupyter_client.manager import KernelManager

    from themisto.kernel.launcher import launcher_command

    class SupervisedKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            command = super().format_kernel_cmd(extra_arguments)
            if confined is not None and self.transport == "tcp":  # the ports are chosen by now (and on restart)
                ports = (self.shell_port, self.iopub_port, self.stdin_port, self.control_port, self.hb_port)
                return launcher_command(command, max_memory, max_cpu_seconds, replace(confined, bind_ports=list(ports)))
            return launcher_command(command, max_memory, max_cpu_seconds, confined)

        async def _async_kill_kernel(self, restart: bool = False) -> None:
            # jupyter_client kills the kernel's process group, which misses processes the notebook
            # started in a session of their own; the launcher, asked with SIGTERM, kills them all
            await _stop_launcher(getattr(self.provisioner, "process", None))
            await super()._async_kill_kernel(restart=restart)

    confined = sandbox
    if os.name != "posix" or transport == "tcp":  # no ipc transport on Windows
        return SupervisedKernelManager(kernel_name=kernel_name, kernel_spec_manager=kernel_specs())
    # Unix sockets in a private folder (mode 0700) rather than TCP ports on localhost: no port
    # another local user could connect to, and no "Kernel is running over TCP without encryption"
    # warning from every kernel. The path is absolute: the kernel runs in another directory.
    sockets = tempfile.mkdtemp(prefix="themisto-kernel-")
    if sandbox is not None:  # the kernel binds its sockets there (and TCP stays denied)
        confined = replace(sandbox, writable=[*sandbox.writable, sockets])
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
