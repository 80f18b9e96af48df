"""The placebo arm: for each step, the recorded kernel state of another step, shown in the runtime block's place.

A placebo prompt is the runtime prompt of a step with the runtime block of
another step: the same format and budget, a comparable length, wrong
information. So runtime − placebo is the effect of *what the block says*, and
placebo − plain the effect of there being a block at all.

The state shown is chosen among the distinct states recorded before the step
(the last :data:`KEPT_STATES` of the build so far; the state before a step is
the snapshot after the previous one, the empty state of a fresh kernel
included), in tiers, the first one that has any:

1. a stale state of the same trajectory in which a variable the step's cell
   reads (the names its code refers to) is described differently, or absent;
2. another trajectory's state in which such a variable differs;
3. a stale state of the same trajectory that differs at all;
4. another trajectory's state that differs at all.

Within the tier, the :data:`CLOSEST` states whose size is nearest the true
state's (the characters of their variables' names, types and reprs, up to the
block's budget; recency breaks ties), and empty only if the true state is
empty, where the tier allows, are the candidates, so the block's length is
comparable; one of them is drawn with ``random.Random``
seeded by the build's seed and the example id, so a build is reproducible and
the draw does not depend on other steps. Both tasks of a step get the same
state. A step for which no other state is known (the first step of the first
trajectory) gets no placebo state: its placebo block is its runtime block.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from themisto.building.history import StepContext, variable_description
from themisto.building.prompts import referenced_names
from themisto.trajectory import Variable

# Distinct states remembered for the choice: enough for a long session's history of states, bounded for memory.
KEPT_STATES = 64
# Candidates of a tier, by closeness of their variable count to the true state's.
CLOSEST = 4
# The key of the empty state (a fresh kernel), which has no recorded hash.
_EMPTY = ""


@dataclass(frozen=True)
class KernelState:
    """A state a runtime block can show: the variables before a step, with the block's header facts."""

    example_id: str  # the step before which the kernel held this state
    trajectory_id: str
    key: str  # the state hash, or _EMPTY for a fresh kernel
    variables: list[Variable]
    rows: list[dict[str, Any]]  # the variables as rows of the `runtime` column
    memory_bytes: int | None
    execution_time: float | None
    changed: list[int]  # per variable: the step at which it last changed
    descriptions: dict[str, tuple[object, ...]]  # per variable name: what the state says of it

    def size(self, budget: int) -> int:
        """About how many characters its runtime block lists: its variables' names, types and reprs, up to ``budget``."""
        return min(budget, self.chars)

    @functools.cached_property
    def chars(self) -> int:
        """Its variables' names, types and reprs in characters, unbounded (once per state: a step's state is
        sized as the true one when its placebo is chosen, then again when it is kept)."""
        return sum(len(v.name) + len(v.type) + len(v.repr) for v in self.variables)


def state_before(context: StepContext, rows: list[dict[str, Any]]) -> KernelState:
    """The state a step's runtime block shows; ``rows`` are its variables as rows of the `runtime` column."""
    before, step = context.before, context.step
    if before is None:  # a fresh kernel: no variables, no memory or timing known
        return KernelState(context.example_id, step.trajectory_id, _EMPTY, [], [], None, None, [], {})
    return KernelState(
        example_id=context.example_id,
        trajectory_id=step.trajectory_id,
        key=before.state_hash,
        variables=before.runtime,
        rows=rows,
        memory_bytes=before.memory_bytes,
        execution_time=before.execution_time,
        changed=context.runtime_changed,
        descriptions={variable.name: variable_description(variable) for variable in before.runtime},
    )


class PlaceboStates:
    """The distinct states seen so far in a build, and the placebo state chosen for a step among them."""

    def __init__(self, seed: int, budget: int) -> None:
        self.seed = seed
        self.budget = budget  # of the runtime block: sizes beyond it render alike
        # the states kept, most recently seen first, with their keys and sizes within the budget beside them:
        # kept in step by list operations, which run in C, as both methods run at every step
        self._newest: list[KernelState] = []
        self._keys: list[str] = []
        self._sizes: list[int] = []

    def choose(self, context: StepContext, true: KernelState) -> KernelState | None:
        """The placebo state of ``context``'s step, whose true state is ``true`` (see the module's tiers)."""
        reads = referenced_names(context.step.code)
        # a read name the true state lacks misleads wherever a state has it; most such names (modules,
        # builtins) are in no state, and a set test rules them out at once
        shown = [(name, true.descriptions[name]) for name in reads if name in true.descriptions]
        unknown = reads.difference(true.descriptions)

        def misleads(state: KernelState) -> bool:
            described = state.descriptions
            return not unknown.isdisjoint(described) or any(described.get(n) != d for n, d in shown)

        size = true.size(self.budget)
        # ranked once by closeness, before the tiers: a stable sort of the newest-first positions, so among
        # equally close states the most recent come first, and the order within a tier is the one sorting the
        # tier alone would give; the true state's own is left out
        distances = [abs(state_size - size) for state_size in self._sizes]
        order = sorted(range(len(distances)), key=distances.__getitem__)
        if true.key in self._keys:
            order.remove(self._keys.index(true.key))
        ranked = [self._newest[position] for position in order]
        mine = [s for s in ranked if s.trajectory_id == true.trajectory_id]
        others = [s for s in ranked if s.trajectory_id != true.trajectory_id]
        tiers = ((s for s in mine if misleads(s)), (s for s in others if misleads(s)), iter(mine), iter(ranked))
        for tier in tiers:  # the first tier that has any; a tier is read only as far as its closest need
            closest = _closest(tier, bool(true.variables))
            if closest:
                return random.Random(f"{self.seed}:placebo:{context.example_id}").choice(closest)
        return None

    def add(self, state: KernelState) -> None:
        """Remember ``state`` as the latest of its kind, forgetting the oldest beyond :data:`KEPT_STATES`."""
        if state.key in self._keys:
            position = self._keys.index(state.key)
            del self._newest[position], self._keys[position], self._sizes[position]
        self._newest.insert(0, state)
        self._keys.insert(0, state.key)
        self._sizes.insert(0, state.size(self.budget))
        if len(self._keys) > KEPT_STATES:
            del self._newest[KEPT_STATES:], self._keys[KEPT_STATES:], self._sizes[KEPT_STATES:]


def _closest(ranked: Iterator[KernelState], has_variables: bool) -> list[KernelState]:
    """The first :data:`CLOSEST` of ``ranked`` that hold variables if the true state does (none if it is
    empty), or the first :data:`CLOSEST` of any kind where none is alike; [] for no state at all."""
    alike: list[KernelState] = []
    first: list[KernelState] = []
    for state in ranked:
        if len(first) < CLOSEST:
            first.append(state)
        if bool(state.variables) == has_variables:
            alike.append(state)
            if len(alike) == CLOSEST:
                break
    return alike or first
