"""A replay kernel that can also run cells in forked, confined children, and check that they left it alone.

:class:`ForkingSession` composes a :class:`~themisto.kernel.recorder.Recorder` (the recorder of
``themisto record``, with its credential scrubbing, resource limits and timeouts): the recorder runs the
replay's own cells; the session adds the forked run of :mod:`themisto.kernel.inside.fork` and the checks
that a forked run changed neither the replay's namespace nor its working folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from themisto.kernel import inject
from themisto.kernel.environment import FORK_ABI
from themisto.kernel.inside import fork, wire
from themisto.kernel.inside.fork import folder_signature
from themisto.kernel.options import KernelOptions
from themisto.kernel.outputs import normalize_output
from themisto.kernel.recorder import Recorder
from themisto.kernel.snapshots import Snapshot
from themisto.kernel.transport import KERNEL_START_TIMEOUT, Execution
from themisto.trajectory import Step, Variable, state_hash, variable_json

# Where the children's private folders go when the working folder is small: a memory file system. The bundled
# ``data/files`` (19 files, 0.9 MB) took 0.8 to 1.0 ms to copy there against 3 to 4 ms on ext4 (docs/performance.md).
MEMORY_ROOT = Path("/dev/shm")
# A private folder of a session's on it, locked (flock) while the session lives; one left unlocked (its process was
# killed) is removed by the next session that starts.
MEMORY_PREFIX = "themisto-fork-"
# A request's copies may take at most this share of the memory file system's free space (the cells write there too,
# and the memory is the machine's) and at most MEMORY_MAX_BYTES; else they go to the scratch folder on disk.
MEMORY_SHARE = 4
MEMORY_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class Checkpoint:
    """What the replay looked like before a forked run: its namespace and its working folder."""

    namespace: dict[str, Variable] | None  # None: unknown (the last snapshot failed)
    folder: tuple[tuple[str, int, int, int], ...]  # (path, mode, size, mtime) of every entry


@dataclass(frozen=True)
class RiddenFork:
    """A forked run that rode on the request of a replay's cell (:meth:`ForkingSession.run_cell_then_fork`)."""

    results: list[wire.ChildResult] | None  # None: no result to use (the run broke, or its answer was unreadable)
    checkpoint: Checkpoint | None  # the replay as the children were forked from it; None: not known
    broken: bool  # the kernel stopped or overran during the run, after the cell: it was restarted, the replay lost
    # the run's time, from its start in the kernel to the reply's arrival (the check and the reply's way back with
    # them), and the host's reading of it
    seconds: float


def folder_bytes(root: Path) -> int:
    """The bytes of the regular files under ``root``, what a copy of it writes (links not followed)."""
    return fork.regular_bytes(folder_signature(root))


def _is_memory_file_system(path: Path) -> bool:
    """Whether ``path`` is where a tmpfs is mounted (False where ``/proc/self/mounts`` cannot be read)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            return any(fields[1:3] == [str(path), "tmpfs"] for fields in map(str.split, mounts))
    except OSError:
        return False


def memory_folder(root: Path = MEMORY_ROOT) -> tuple[Path, int] | None:
    """A new private folder on the memory file system at ``root``, and a descriptor of it that holds its lock as long
    as it is open (None where there is no such file system, or it is not writable). First, the folders there of
    this user's sessions that hold no lock any more (their process ended before it removed its own) are removed."""
    if not _is_memory_file_system(root):
        return None
    _remove_unlocked(root)
    made = ""
    try:
        # made under a name no session removes, locked, then named: another session's pass never finds it unlocked
        made = tempfile.mkdtemp(prefix=f".{MEMORY_PREFIX}", dir=root)
        handle = os.open(made, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(handle, fcntl.LOCK_EX)
        named = root / os.path.basename(made)[1:]
        os.rename(made, named)
    except OSError:
        if made:
            shutil.rmtree(made, ignore_errors=True)
        return None
    return named, handle


def _remove_unlocked(root: Path) -> None:
    """Remove the session folders under ``root`` that are this user's and whose lock no process holds."""
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            if not entry.name.startswith(MEMORY_PREFIX):
                continue
            try:  # a link is never followed, nor a folder of another user's removed
                handle = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if os.fstat(handle).st_uid == os.geteuid():
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: its session lives
                    shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                pass
            finally:
                os.close(handle)


class ForkingSession:
    """One replay kernel: the recorder's cells, plus cells run in forked children of the kernel.

    ``scratch`` holds the code files a forked run reads and the children's private folders (the kernel's
    sandbox lets it write there too), those of a small working folder in :attr:`memory` instead, a private
    folder on a memory file system where there is one (:func:`memory_folder`, removed with the session).
    Where the kernel is sandboxed (``options.sandbox``, which here needs Landlock ABI 6) each child runs in a
    nested Landlock domain: it writes only in its private folder, signals and
    ptraces nothing outside its domain (the kernel, the scorer), and connects to no TCP port (the kernel's
    channels among them).
    """

    def __init__(
        self,
        trajectory_id: str,
        workdir: Path,
        options: KernelOptions,
        scratch: Path,
        *,
        stop: threading.Event | None = None,
    ) -> None:
        found = memory_folder()
        self.memory: Path | None = found[0] if found else None
        self._memory_lock = found[1] if found else -1  # its descriptor, whose lock says the session lives
        try:
            self.recorder = Recorder(
                trajectory_id,
                workdir,
                options,
                stop=stop,
                installs=inject.fork_install_expressions(),
                also_writable=(scratch,) if self.memory is None else (scratch, self.memory),
                sandbox_abi=FORK_ABI,
            )
        except BaseException:
            self._remove_memory()
            raise
        self.workdir, self.options, self.scratch = workdir, options, scratch
        self._requests = 0
        # the replay's namespace as the last fork request's own snapshot found it after its children: the check
        # after a forked run of confined children (changed_since), read from the same reply
        self._after_fork: Snapshot | None = None

    def __enter__(self) -> ForkingSession:
        try:
            self.recorder.start()
        except BaseException:
            self._remove_memory()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.recorder.close()
        finally:
            self._remove_memory()

    def _remove_memory(self) -> None:
        if self.memory is not None:
            shutil.rmtree(self.memory, ignore_errors=True)
            os.close(self._memory_lock)
            self.memory = None

    # the replay's own cells

    def run_cell(self, code: str, cell_id: str, interrupt_after: float | None = None) -> Step:
        return self.recorder.run_cell(code, cell_id, interrupt_after=interrupt_after)

    def restart(self) -> None:
        self.recorder.restart()

    def skip_stopped(self) -> None:
        self.recorder.skip_stopped()

    def before(self) -> dict[str, Variable] | None:
        """The namespace before the next cell, as the last snapshot described it; None: unknown."""
        return self.recorder.known_variables()

    # forked runs

    def run_cell_then_fork(
        self, code: str, cell_id: str, then_fork: Sequence[str], interrupt_after: float | None = None
    ) -> tuple[Step, RiddenFork | None]:
        """The replay's cell, recorded; then, in the same request, ``then_fork`` run in forked children and the
        check that they left the replay alone, where :attr:`folds` and no user interrupts the cell (None: they did
        not run, the cell raised or was stopped).

        The children are forked from the replay as the cell left it, as a request of their own would, one round
        trip sooner: the kernel walks the working folder before its first fork (the check's "before"), the
        children's snapshots name the generation the cell's snapshot makes, and the check's snapshot follows the
        run (confined children reach none of the kernel's channels, see :meth:`fork_execution`).
        """
        if not then_fork or not self.folds or interrupt_after is not None:  # an interrupt could land in the run
            return self.run_cell(code, cell_id, interrupt_after), None
        known = self.recorder.known_generation()
        named = known + 1 if known >= 0 else -1  # what the cell's snapshot makes; -1: everything in full
        request = self.fork_request(then_fork, after_cell=True, known=named)
        check = replace(self.recorder.snapshot_request(), known=named, announce=None)
        more = {"fork": inject.fork_run_expression(request), "check": inject.snapshot_expression(check)}
        try:
            step, execution = self.recorder.run_cell_then(
                code, cell_id, more, self._fork_limit(len(then_fork), len(more)), interrupt_after=interrupt_after
            )
        finally:
            _remove_code_files(request)
        read = time.perf_counter()
        answers = execution.user_expressions
        began = execution.more_started or "fork" in answers  # ipykernel evaluates nothing after a cell that raised
        if began and (execution.broken or execution.timed_out):
            # the kernel died or overran after the cell (an interrupt read past the snapshot's end among them): the
            # replay, and the step's snapshot, are not to be trusted
            if not execution.broken:
                self.recorder.restart()
            return step, RiddenFork(None, None, True, 0.0)
        if not began:
            return step, None  # the cell raised, overran or killed the kernel: nothing was forked
        before = self.before()
        answer = _fork_answer(answers.get("fork"))
        folder = _signature(answer.folder) if answer is not None else None
        checkpoint = None if folder is None else Checkpoint(before, folder)
        if answer is None or folder is None or (named >= 0 and self.recorder.known_generation() != named):
            # an answer the notebook's code broke, or children's snapshots naming one the host did not take whole
            self._after_fork = None
            return step, RiddenFork(None, checkpoint, False, 0.0)
        self._after_fork = self.recorder.read_snapshot(execution, "check")
        ran = max((execution.replied_at or answer.began) - answer.began, 0.0)
        # the step's time is the cell's: the request's, less its snapshot's (the recorder's) and the run's
        step = replace(step, execution_time=round(max(step.execution_time - ran, 0.0), 6))
        results = answer.children if len(answer.children) == len(then_fork) else None
        return step, RiddenFork(results, checkpoint, False, ran + time.perf_counter() - read)

    @property
    def folds(self) -> bool:
        """Whether a forked run may ride on the replay's cell request (:meth:`run_cell_then_fork`): its children are
        confined, so the check needs no request of its own."""
        return self._checks_in_fork_request

    def fork_request(self, codes: Sequence[str], after_cell: bool = False, known: int = -1) -> wire.ForkRequest:
        """The request that runs ``codes`` in forked children; each code goes to a file of its own.

        ``after_cell``: it rides on a cell's request, whose snapshot makes the generation ``known`` that the
        children's snapshots name (see :meth:`run_cell_then_fork`)."""
        self._requests += 1
        files = []
        for number, code in enumerate(codes):
            # a file of its own (no folder per request: its removal cost more than the rest), in memory where there
            # is some (creating and deleting it on ext4 took 63 against 16 us)
            descriptor, path = tempfile.mkstemp(
                prefix=f"code-{self._requests}-{number}-", suffix=".py", dir=self.memory or self.scratch
            )
            with open(descriptor, "w", encoding="utf-8") as file:
                file.write(code)
            files.append(path)
        snapshot = replace(self.recorder.snapshot_request(), announce=None)
        return wire.ForkRequest(
            code_files=files,
            timeout=self.options.timeout,
            max_raw_output_chars=self.options.max_raw_output_chars,
            root=str(self.workdir),
            # after a cell the kernel chooses, by the folder as the cell left it
            scratch=str(self.scratch if after_cell else self.children_place(len(codes))),
            confine=self.recorder.sandbox.confined,
            # the children's snapshots name the variables unchanged since the recorder's last one (or the one the
            # cell's makes), and announce nothing (the recorder's file is not theirs to write)
            snapshot=replace(snapshot, known=known) if after_cell else snapshot,
            after_cell=after_cell,
            memory=None if self.memory is None or not after_cell else str(self.memory),
            memory_bytes=self.memory_room() if after_cell else 0,
        )

    def children_place(self, count: int) -> Path:
        """Where ``count`` children's private folders go: :attr:`memory` while their copies of the working folder
        take at most a :data:`MEMORY_SHARE` of its free space and :data:`MEMORY_MAX_BYTES`, else ``scratch``."""
        if self.memory is None or count * folder_bytes(self.workdir) > self.memory_room():
            return self.scratch
        return self.memory

    def memory_room(self) -> int:
        """The bytes a request's copies may take in :attr:`memory` (0 where there is none)."""
        if self.memory is None:
            return 0
        try:
            room = os.statvfs(self.memory)
        except OSError:
            return 0
        return min(MEMORY_MAX_BYTES, room.f_bavail * room.f_frsize // MEMORY_SHARE)

    @property
    def _checks_in_fork_request(self) -> bool:
        """Whether the check after a forked run is an expression of the fork request: its children are confined."""
        return self.recorder.sandbox.confined

    def fork_execution(self, codes: Sequence[str]) -> Execution:
        """The silent request whose user expression runs ``codes`` in forked children (``fork.run``)."""
        request = self.fork_request(codes)
        expressions = {"fork": inject.fork_run_expression(request)}
        if self._checks_in_fork_request:
            # evaluated after the fork's expression, once every child is dead: a confined child reaches none of
            # the kernel's channels (its sockets closed, no new Unix socket, no TCP), so no request of its
            # making can be waiting behind this one, and the check needs no round trip of its own
            expressions["snapshot"] = self.recorder.snapshot_expression()
        try:
            return self.recorder.request(expressions, self._fork_limit(len(codes), len(expressions)))
        finally:
            _remove_code_files(request)

    def _fork_limit(self, count: int, expressions: int) -> float:
        """Seconds a request of ``expressions`` user expressions, one a forked run of ``count`` codes, may take.

        Each child has its time to get ready (its copy of the folder), its timeout for the cell and again for the
        snapshot, and a few seconds to answer the parent between them; the forks and reaps take the rest, and each
        other expression (a snapshot) a timeout.
        """
        each = fork.READY_SECONDS + 2 * self.options.timeout + fork.ACK_SECONDS
        return count * each + KERNEL_START_TIMEOUT + self.options.timeout * (expressions - 1)

    def fork_run(self, codes: Sequence[str]) -> list[wire.ChildResult] | None:
        """Each code's result in a forked child of the kernel; None if the kernel died (it has been restarted)."""
        execution = self.fork_execution(codes)
        if execution.broken:
            self.recorder.restart()
            return None
        if self._checks_in_fork_request:
            self._after_fork = self.recorder.read_snapshot(execution)
        answer = execution.user_expressions.get("fork")
        if not isinstance(answer, dict) or answer.get("status") != "ok":
            # notebook code broke os.fork or the module (or the request timed out and was interrupted)
            evalue = answer.get("evalue", "no answer") if isinstance(answer, dict) else "no answer"
            return [wire.fault("fault", "KernelError", f"the forked run failed: {evalue}")] * len(codes)
        parsed = _fork_answer(answer)
        results = parsed.children if parsed is not None else []
        if len(results) != len(codes):
            return [wire.fault("fault", "KernelError", "malformed answer from the kernel")] * len(codes)
        return results

    # integrity

    def child_state(self, snapshot: str, before: dict[str, Variable]) -> str:
        """The state key of a forked child's snapshot, checked as the replay's own; ValueError where it is malformed.

        ``before``: the namespace the child was forked from (a variable sent by name alone is unchanged since).
        """
        return state_key(self.recorder.child_variables(snapshot, before))

    def checkpoint(self) -> Checkpoint:
        """The replay's namespace (as last described) and working folder, before a forked run."""
        self._after_fork = None  # a snapshot from before this checkpoint says nothing of what follows it
        return Checkpoint(self.before(), folder_signature(self.workdir))

    def changed_since(self, checkpoint: Checkpoint) -> str | None:
        """What a forked run changed in the replay since ``checkpoint`` (namespace or folder); None: nothing."""
        if folder_signature(self.workdir) != checkpoint.folder:
            return "the replay's working folder"
        if checkpoint.namespace is None:
            return None
        # unconfined, a request of its own, not an expression of the fork request: a request a child sent the
        # kernel's shell channel runs before it, so its change is seen (test_attacks_exec.py, E3)
        now, self._after_fork = self._after_fork or self.recorder.take_snapshot(), None
        if now.error is not None or not _same_state(now.variables, checkpoint.namespace):
            return "the replay's namespace"
        return None


def _remove_code_files(request: wire.ForkRequest) -> None:
    """Delete the code files of ``request``: the kernel deletes them, not if it never got to them."""
    for path in request.code_files:
        Path(path).unlink(missing_ok=True)


def _fork_answer(answer: object) -> wire.ForkResult | None:
    """The ``fork.run`` answer of a user expression's result; None where it failed or is malformed."""
    if not isinstance(answer, dict) or answer.get("status") != "ok":
        return None
    try:
        return wire.ForkResult.from_json(answer["data"]["text/plain"])
    except (KeyError, TypeError, ValueError):
        return None


def _signature(entries: list[object] | None) -> tuple[tuple[str, int, int, int], ...] | None:
    """A :func:`folder_signature` the kernel sent as JSON; None where it is not one."""
    if entries is None:
        return None
    found = []
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 4 and type(entry[0]) is str):
            return None
        if not all(type(number) is int for number in entry[1:]):
            return None
        found.append((entry[0], entry[1], entry[2], entry[3]))
    return tuple(found)


def _same_state(variables: Sequence[Variable], before: dict[str, Variable]) -> bool:
    """Whether ``variables`` describe the namespace ``before`` did (the same :func:`state_key`).

    A snapshot that found nothing changed hands back the very records of the last one (``SnapshotReader``), which
    need no hashing: two state keys cost 0.3 to 1 ms of every forked run for a notebook's few dozen variables.
    """
    if len(variables) == len(before) and all(now is then for now, then in zip(variables, before.values())):
        return True
    return state_key(variables) == state_key(list(before.values()))


# The key text of each variable record lately hashed, by the record's identity (the record kept with it, so that its
# id is not reused): a snapshot hands back the very records of the variables a cell left unchanged, so a step's
# children, its check and the next steps hash each record once (0.13 ms a child's state for a notebook's few
# dozen variables, most of it these texts). Records are not changed once read (snapshots.py trims them before).
_KEY_TEXTS: dict[int, tuple[Variable, str]] = {}
# Records kept at most: a few notebooks' namespaces, a few MB.
KEY_TEXTS_KEPT = 4096


def state_key(variables: Sequence[Variable]) -> str:
    """A hash of a namespace by what a cell decides: names, types, reprs (addresses masked), shapes, lengths.

    The size estimate is left out: ``getsizeof`` of a list depends on how it
    was grown (``list(range(3))`` and ``[0, 1, 2]`` differ), not on its value.
    """
    texts = []
    for variable in variables:
        known = _KEY_TEXTS.get(id(variable))
        if known is None or known[0] is not variable:
            if len(_KEY_TEXTS) >= KEY_TEXTS_KEPT:
                _KEY_TEXTS.clear()
            keyed = replace(variable, size_bytes=None, size_method=None, repr=normalize_output(variable.repr))
            known = _KEY_TEXTS[id(variable)] = (variable, variable_json(keyed))
        texts.append(known[1])
    return state_hash([], texts)
