"""Shared fixtures (a kernel per test module, the fixture build, the tiny model) and the markers that sort tests.

Markers (registered in setup.cfg): ``kernel`` for a test that starts a Jupyter
kernel, in this process or through a ``themisto record|stability|exec-score``
process; ``slow`` for one that takes seconds without a kernel (a model run, a
wheel build). ``make test-fast`` runs the others. A test that uses the
``kernel`` or ``fresh_kernel`` fixture is marked here; any other test that
tries to start a kernel from this process without the marker fails at once
(an audit hook refuses the process), so the fast run never starts one. A
kernel that a child process starts (a ``python -c`` script, a shell running
``themisto record``) is out of the hook's sight: such a test carries the
marker by hand.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import cast

import pytest
from dataset_fixture import write_dataset
from tiny_model import make_tiny_model

from themisto.kernel.inside import landlock, namespaces
from themisto.kernel.recorder import Recorder
from themisto.recording.options import RecordOptions

# What a test module's kernels record with unless it sets KERNEL_OPTIONS.
DEFAULT_KERNEL_OPTIONS = RecordOptions(timeout=30)
KERNEL_FIXTURES = frozenset({"kernel", "fresh_kernel"})
# A process is a kernel (or starts some) when its command line names one of these.
KERNEL_PROGRAMS = ("ipykernel_launcher", "themisto.kernel.launcher")
KERNEL_COMMANDS = frozenset({"record", "stability", "exec-score"})
NO_SANDBOX_SKIP = (
    "this system has no Linux Landlock, or refuses user, network and PID namespaces (or their /proc), so kernels refuse to start"
    " sandboxed (see SECURITY.md)"
)
# tests/vllm_backend run vLLM for real in the environment `make vllm` makes (`make test-vllm`); the main one has no vLLM
collect_ignore = [] if importlib.util.find_spec("vllm") else ["vllm_backend"]


def _kernel_options(request: pytest.FixtureRequest) -> RecordOptions:
    """The options of the requesting module's kernels: its ``KERNEL_OPTIONS``, else the default."""
    options: RecordOptions = getattr(request.module, "KERNEL_OPTIONS", DEFAULT_KERNEL_OPTIONS)
    return options


@pytest.fixture(scope="module")
def kernel(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorder]:
    """One kernel per module, for the tests that neither restart it nor depend on a fresh namespace."""
    workdir = tmp_path_factory.mktemp("kernel")
    with Recorder(trajectory_id="shared", workdir=workdir, options=_kernel_options(request)) as recorder:
        yield recorder


@pytest.fixture
def fresh_kernel(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Recorder]:
    """A kernel of the test's own, for tests that restart it, kill it or need an empty namespace."""
    with Recorder(trajectory_id="fresh", workdir=tmp_path, options=_kernel_options(request)) as recorder:
        yield recorder


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small dataset build (tests/dataset_fixture.py), as ``themisto build`` writes one."""
    return write_dataset(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def tiny_model(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random GPT-2 (2 layers, width 64) and a BPE tokenizer trained on the fixture prompts."""
    return make_tiny_model(data_dir, tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct exported for vLLM (``python -m themisto.evaluation.local_models smollm2 --export``),
    with vLLM's engine settings (tests/vllm_engine.py) in this process's environment and its commands'."""
    from vllm_engine import ENGINE_ENV

    from themisto.evaluation.local_models import SMOLLM2, main

    os.environ.update(ENGINE_ENV)
    folder = tmp_path_factory.mktemp("smollm2")
    assert main([SMOLLM2.name, "--export", str(folder)]) == 0
    return folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Kernels start in a sandbox (Landlock, namespaces) unless told otherwise, and refuse to start where the
    # system offers none: there the kernel tests are skipped with the reason, not failed by the hundred.
    no_sandbox = landlock.abi_version() < 1 or namespaces.unavailable() is not None
    for item in items:
        if KERNEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kernel)
        if no_sandbox and item.get_closest_marker("kernel"):
            item.add_marker(pytest.mark.skip(reason=NO_SANDBOX_SKIP))


# --- the kernel marker, kept honest --------------------------------------------------------------

# The kernel command lines started by the test now running, while it is not marked `kernel`.
_unmarked_starts: list[str] | None = None


def starts_kernels(argv: Sequence[object]) -> bool:
    """Whether a process with this command line is a kernel or a themisto command that starts kernels."""
    words = [str(word) for word in argv]
    if any(program in word for word in words for program in KERNEL_PROGRAMS):
        return True
    named = [i for i, word in enumerate(words[:3]) if Path(word).name == "themisto"]
    return bool(named) and bool(KERNEL_COMMANDS & set(words[named[0] + 1 :]))


def _watch_process_starts(event: str, args: tuple[object, ...]) -> None:
    """Refuse (and note) a kernel start while an unmarked test runs: raising here stops the Popen."""
    if event != "subprocess.Popen" or _unmarked_starts is None:
        return
    argv = args[1]
    words = [argv] if isinstance(argv, str | bytes | os.PathLike) else list(cast(Iterable[object], argv))
    if starts_kernels(words):
        _unmarked_starts.append(" ".join(map(str, words))[:160])
        raise RuntimeError("a test not marked `kernel` may not start a kernel")


sys.addaudithook(_watch_process_starts)  # an audit hook sees every Popen, from any library or thread


def _refuse_unmarked_kernels(item: pytest.Item) -> Generator[None, object, object]:
    """Run a test phase; fail it if it tried to start a kernel while the test is not marked ``kernel``."""
    global _unmarked_starts
    _unmarked_starts = None if item.get_closest_marker("kernel") else []
    try:
        return (yield)
    finally:
        started, _unmarked_starts = _unmarked_starts, None
        if started:  # replaces whatever error the refused start caused
            pytest.fail(f"tried to start a kernel without the `kernel` marker: {started[0]}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _refuse_unmarked_kernels(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _refuse_unmarked_kernels(item))
