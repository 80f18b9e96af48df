"""Synthetic but realistic trajectories for the builder's tests and benchmarks.

A simulated notebook session: each step assigns or updates a variable, prints
output of varying length, sometimes raises, and sometimes follows a kernel
restart (which wipes the variables). The runtime snapshot of a step is the
namespace *after* it, as the recorder writes it.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from themisto.trajectory import Step, TrajectoryWriter, Variable


def _variable(name: str, value: int, rng: random.Random) -> Variable:
    if rng.random() < 0.5:
        items = list(range(value % 17))
        return Variable(name, "builtins.list", 56 + 8 * len(items), repr(items), len=len(items))
    return Variable(name, "builtins.int", 28, repr(value))


def synthetic_steps(
    trajectory_id: str, n_steps: int, seed: int = 0, error_rate: float = 0.1, restart_rate: float = 0.03
) -> list[Step]:
    """A trajectory of ``n_steps`` with errors, restarts and an evolving namespace."""
    rng = random.Random(f"{trajectory_id}:{seed}")
    namespace: dict[str, Variable] = {}
    steps: list[Step] = []
    for number in range(n_steps):
        restarted = number > 0 and rng.random() < restart_rate
        if restarted:
            namespace = {}
        name = f"v{rng.randrange(12)}"
        value = rng.randrange(10_000)
        error = None
        if rng.random() < error_rate:
            missing = f"undefined_{rng.randrange(100)}"
            code = f"{name} = {missing} + {value}\nprint({name})"
            error = {"ename": "NameError", "evalue": f"name '{missing}' is not defined"}
            output = f"NameError: name '{missing}' is not defined"
        else:
            width = rng.choice([0, 1, 3, 8, 20, 60])
            code = f"{name} = {value}\n" + (f"print(str({name}) * {width})" if width else f"{name} += 1")
            namespace[name] = _variable(name, value, rng)
            output = str(value) * width + ("\n" if width else "")
        runtime = [namespace[key] for key in sorted(namespace)]
        state = json.dumps([v.__dict__ for v in runtime], sort_keys=True)
        steps.append(
            Step(
                trajectory_id=trajectory_id,
                step=number,
                cell_id=f"cell-{rng.randrange(30)}",
                code=code,
                output=output,
                error=error,
                execution_time=round(rng.uniform(0.001, 2.0), 6),
                memory_bytes=50_000_000 + 4096 * number,
                runtime=runtime,
                state_hash=hashlib.sha256(state.encode()).hexdigest()[:16],
                restarted=restarted,
                stable=rng.random() < 0.9 if number % 2 else None,
            )
        )
    return steps


def write_steps(path: Path, steps: list[Step]) -> Path:
    """Write ``steps`` as a trajectory JSONL file with the project's writer."""
    with TrajectoryWriter(path) as writer:
        for step in steps:
            writer.write(step)
    return path


def write_corpus(folder: Path, trajectories: int, steps_each: int, seed: int = 0) -> list[Path]:
    """Write ``trajectories`` synthetic trajectory files into ``folder``."""
    return [
        write_steps(folder / f"nb{index:03d}.jsonl", synthetic_steps(f"nb{index:03d}", steps_each, seed))
        for index in range(trajectories)
    ]
