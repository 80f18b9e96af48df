"""The untrusted kernel's process: its environment without credentials, its kernel spec and its limits."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from typing import Any

from themisto.exceptions import InputError

# Environment variables whose name contains one of these words (split on "_") are
# credentials and never reach the kernel: AWS_SECRET_ACCESS_KEY, HF_TOKEN, ...
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
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "COOKIE",
        "PRIVATE",
    }
)
# Words that are credentials even inside a longer word (GITHUBTOKEN, DBPASSWORD).
CREDENTIAL_FRAGMENTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL")


def is_credential(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret."""
    upper = name.upper()
    words = set(re.split(r"[^A-Z0-9]+", upper))
    return bool(words & CREDENTIAL_WORDS) or any(fragment in upper for fragment in CREDENTIAL_FRAGMENTS)


def kernel_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The recording process's environment without credentials, for the untrusted kernel."""
    return {name: value for name, value in environ.items() if not is_credential(name)}


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


def limited_kernel_manager(kernel_name: str, max_memory: int | None, max_cpu_seconds: int | None) -> Any:
    """A kernel manager for ``kernel_name`` whose kernel (and its restarts) runs under these limits."""
    from jupyter_client import KernelManager

    from themisto.recording.launcher import launcher_command

    class LimitedKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            command = super().format_kernel_cmd(extra_arguments)
            return launcher_command(command, max_memory, max_cpu_seconds)

    if os.name != "posix":  # no ipc transport on Windows
        return LimitedKernelManager(kernel_name=kernel_name, kernel_spec_manager=kernel_specs())
    # Unix sockets in a private folder (mode 0700) rather than TCP ports on localhost: no port
    # another local user could connect to, and no "Kernel is running over TCP without encryption"
    # warning from every kernel. The path is absolute: the kernel runs in another directory.
    sockets = tempfile.mkdtemp(prefix="themisto-kernel-")
    manager = LimitedKernelManager(
        kernel_name=kernel_name,
        kernel_spec_manager=kernel_specs(),
        transport="ipc",
        ip=os.path.join(sockets, "kernel"),
    )
    weakref.finalize(manager, shutil.rmtree, sockets, True)  # the folder goes with its manager
    return manager


def check_kernel(name: str) -> None:
    """Raise :class:`InputError` unless a Jupyter kernel spec called ``name`` is installed."""
    from jupyter_client.kernelspec import NoSuchKernel

    manager = kernel_specs()
    try:
        manager.get_kernel_spec(name)
    except NoSuchKernel:
        known = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise InputError(f"unknown kernel {name!r} (installed: {known})") from None
