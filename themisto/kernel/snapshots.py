"""The host's reading of a kernel's snapshot: what it asks for, the answer checked, its faults as ``snapshot_error``.

The snapshot a kernel sends back (see :func:`themisto.kernel.inside.snapshot.take`)
is checked, not trusted: each record is validated on arrival (types, 64-bit
integers, text cleaned of lone surrogates, lengths of names and types), a bad
record is dropped and named in the step's ``snapshot_error``, and a snapshot the
kernel could not take or sent malformed asks for the snapshot module to be
installed again before the next cell. A variable unchanged since the last
snapshot received comes by name alone and is taken from what that snapshot said.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from themisto.exceptions import TrajectoryError
from themisto.kernel.inside import snapshot, wire
from themisto.kernel.options import KernelOptions
from themisto.kernel.outputs import cap_text, scrub
from themisto.kernel.transport import Execution, exit_status
from themisto.trajectory import Variable, record_from_dict, state_hash, variable_json

log = logging.getLogger(__name__)

# Caps on a snapshot record's names (a variable's name, its type's qualified name, its size method).
MAX_NAME_CHARS = 256
MAX_TYPE_CHARS = 512
MAX_SIZE_METHOD_CHARS = 64


@dataclass
class Snapshot:
    """The variables a snapshot reported, once checked."""

    variables: list[Variable]
    seconds: float = 0.0  # kernel-side time the snapshot took
    omitted: int = 0  # variables beyond the cap on their number
    error: str | None = None  # what was dropped, and why


class SnapshotReader:
    """The snapshots one kernel sent a recorder: each checked on arrival, the last one kept to read the next.

    ``reinstall`` is set when a snapshot failed in a way that says the kernel-side
    module is broken; whoever installs it again clears it.
    """

    def __init__(self, trajectory_id: str, options: KernelOptions) -> None:
        self.trajectory_id, self.options = trajectory_id, options
        self.reinstall = False
        # the last snapshot received: its kernel-side generation and, by name, each variable and its
        # variable_json, so unchanged variables are neither sent, parsed nor encoded again
        self._known: tuple[int, dict[str, tuple[Variable, str]]] = (-1, {})
        # the records last hashed (kept, so their identities are not reused) and their state hash
        self._hashed: tuple[list[Variable], str] = ([], state_hash([]))

    def request(self, announce: Path | None) -> wire.SnapshotRequest:
        """The snapshot the options ask for, naming the last snapshot received; ``announce``: the kernel's file."""
        return wire.SnapshotRequest(
            self.options.max_repr_chars,
            self.options.repr_timeout,
            self.options.max_variables,
            self._known[0],
            None if announce is None else str(announce),
        )

    @property
    def generation(self) -> int:
        """The kernel-side generation of the last snapshot received; -1: none is known."""
        return self._known[0]

    def forget(self) -> None:
        """Forget the last snapshot (a new kernel process, or a lost snapshot): the next comes in full."""
        self._known = (-1, {})

    def known_variables(self) -> dict[str, Variable] | None:
        """The namespace as the last snapshot received described it; None: unknown."""
        generation, entries = self._known
        return None if generation < 0 else {name: entry[0] for name, entry in entries.items()}

    def read(self, execution: Execution, step: int, name: str = "snapshot") -> Snapshot | None:
        """The checked snapshot of the expression ``name`` in ``execution``'s reply for ``step``; None if it was not
        evaluated."""
        result = execution.user_expressions.get(name)
        if result is None:
            return None
        if not isinstance(result, dict) or result.get("status") != "ok":
            # a cell that tampers with the kernel's modules gets here; the step is still recorded
            evalue = result.get("evalue") if isinstance(result, dict) else result
            return self._failed(f"snapshot failed: {evalue}", step)
        try:
            payload = decoded(result["data"]["text/plain"])
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # the notebook's code can replace the kernel-side snapshot function, so its answer is untrusted
            return self._failed(f"malformed snapshot: {exc!r}", step)
        if payload.unchanged and self._known[0] < 0:  # the kernel sends it only to a request that names one
            return self._failed("malformed snapshot: unchanged, but no snapshot is known", step)
        entries, problems, omitted = self._checked(payload)
        self._known = (payload.generation, {entry[0].name: entry for entry in entries})
        if problems:
            log.warning("%s step %d: snapshot records dropped: %s", self.trajectory_id, step, problems[0])
            self._known = (-1, self._known[1])  # the next snapshot comes in full
        error = None
        if problems:
            error = cap_text(f"{len(problems)} variable record(s) dropped: " + "; ".join(problems), 300)[0]
        return Snapshot([entry[0] for entry in entries], max(payload.seconds, 0.0), omitted, error)

    def child_variables(self, text: str, before: Mapping[str, Variable]) -> list[Variable]:
        """The variables of a forked child's snapshot (``text``), checked as :meth:`read` checks a snapshot.

        A variable sent by name alone is unchanged since ``before``, the namespace the child's request named
        (see :func:`themisto.kernel.inside.snapshot.take`). ValueError (naming the first problem) for a snapshot
        :meth:`read` would not take whole; this reader's own state is left as it was.
        """
        previous = {name: (variable, "") for name, variable in before.items()}  # its text is never needed
        entries, problems, _ = self._checked(decoded(text), previous)
        if problems:
            raise ValueError(problems[0])
        return [entry[0] for entry in entries]

    def _checked(
        self, payload: wire.SnapshotResult, previous: Mapping[str, tuple[Variable, str]] | None = None
    ) -> tuple[list[tuple[Variable, str]], list[str], int]:
        """The valid records of ``payload`` (up to the variable cap), why the others were dropped, how many omitted.

        A record by name alone is taken from ``previous`` (default: the last snapshot received).
        """
        records = payload.variables
        known = self._known[1] if previous is None else previous
        if payload.unchanged:  # the known snapshot's variables, as they were (decoded checked it names one)
            return list(known.values()), [], payload.omitted
        entries, problems = self._checked_entries(records[: self.options.max_variables], known)
        return entries, problems, payload.omitted + max(0, len(records) - self.options.max_variables)

    def state_hash(self, variables: list[Variable]) -> str:
        """:func:`~themisto.trajectory.state_hash` of ``variables``; the last one again where they are the very
        records it hashed, in order (an unchanged namespace hands back the last snapshot's records: hashing a
        notebook's hundred variables took a tenth of a step's snapshot)."""
        hashed, found = self._hashed
        if len(hashed) == len(variables) and all(map(operator.is_, hashed, variables)):
            return found
        found = state_hash(variables, self.variable_texts(variables))
        self._hashed = (list(variables), found)
        return found

    def variable_texts(self, variables: list[Variable]) -> list[str]:
        """Each variable's variable_json, taken from the last snapshot where it is that very object."""
        known = self._known[1]
        texts = []
        for variable in variables:
            entry = known.get(variable.name)
            texts.append(entry[1] if entry is not None and entry[0] is variable else variable_json(variable))
        return texts

    def _checked_entries(
        self, records: list[Any], previous: Mapping[str, tuple[Variable, str]]
    ) -> tuple[list[tuple[Variable, str]], list[str]]:
        """Each valid record as a variable and its variable_json; the reasons the others were dropped."""
        entries: list[tuple[Variable, str]] = []
        problems: list[str] = []
        names: set[str] = set()
        for index, record in enumerate(records):
            try:
                if isinstance(record, dict) and record.keys() == {"name"}:
                    # unchanged since the last snapshot received (see snapshot.take)
                    entry = previous[record["name"]]
                else:
                    entry = _known_entry(self._checked_record(record))
            except (KeyError, TypeError, TrajectoryError) as exc:
                problems.append(f"record {index}: {snapshot.clean_text(str(exc))[:120]}")
                continue
            if entry[0].name in names:
                problems.append(f"record {index}: a second variable named {entry[0].name[:40]!r}")
                continue
            names.add(entry[0].name)
            entries.append(entry)
        return entries, problems

    def _checked_record(self, record: Any) -> Variable:
        """A snapshot record as a :class:`Variable`, or :class:`TrajectoryError` naming what is wrong."""
        variable = record_from_dict(Variable, scrub(record), "the record")
        limits = (("name", MAX_NAME_CHARS), ("type", MAX_TYPE_CHARS), ("size_method", MAX_SIZE_METHOD_CHARS))
        for name, limit in limits:
            value = getattr(variable, name)
            if value is not None and len(value) > limit:
                raise TrajectoryError(f"its {name} is longer than {limit} characters")
        if variable.description is not None and len(variable.description) > snapshot.DESCRIPTION_CHARS:
            variable.description = variable.description[: snapshot.DESCRIPTION_CHARS]
        if len(variable.repr) > self.options.max_repr_chars:
            variable.repr, variable.repr_truncated = variable.repr[: self.options.max_repr_chars], True
        return variable

    def _failed(self, reason: str, step: int) -> Snapshot:
        """A snapshot the kernel could not take or sent malformed: empty, saying why, and reinstalled next time."""
        reason = cap_text(snapshot.clean_text(reason), 300)[0]
        log.warning("%s step %d: %s", self.trajectory_id, step, reason)
        self.forget()
        self.reinstall = True
        return Snapshot([], error=reason)


def decoded(text: Any) -> wire.SnapshotResult:
    """The snapshot a kernel sent as JSON ``text``, every field checked; ValueError where it is not one."""
    payload = wire.SnapshotResult.from_json(text)
    if payload.omitted < 0:
        raise ValueError("omitted is negative")
    if payload.unchanged and payload.variables:
        raise ValueError("an unchanged snapshot lists variables")
    return payload


def _known_entry(variable: Variable) -> tuple[Variable, str]:
    """A variable and its variable_json."""
    return variable, variable_json(variable)


def snapshot_fault(execution: Execution, timeout: float) -> str | None:
    """Why the snapshot of a cell that ran fine is missing or incomplete; None if it did not fail that way."""
    if execution.cell_seconds is None:
        return None
    if execution.died:
        return f"the kernel died while taking the snapshot{exit_status(execution.exit_code)} and was restarted"
    if execution.wedged:
        return f"the snapshot did not finish within {timeout:g} s nor stop when interrupted; the kernel was restarted"
    if execution.unresponsive is not None:
        return f"the kernel {execution.unresponsive} while taking the snapshot and was restarted"
    if execution.timed_out:
        return f"the snapshot did not finish within {timeout:g} s and was interrupted"
    return None
