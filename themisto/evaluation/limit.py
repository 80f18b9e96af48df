"""``--limit`` as a sample spread over trajectories, so a cheap run estimates the full one.

lm-eval's own ``limit`` takes the first N rows of a task, and a build's rows run
trajectory by trajectory: 100 rows cover the first few trajectories only. Here a
limit draws a seeded systematic sample instead, stratified by trajectory: the
trajectories are put in a seeded random order, each one's rows shuffled (seeded)
within it, and every (n / N)-th row of that sequence is taken from a seeded
start. Each trajectory then gives ``floor`` or ``ceil`` of ``N * its share of
the rows`` (proportional allocation: the sample's mean estimates the full
split's, and every trajectory whose share is a row or more is covered), and the
draw depends only on the trajectory ids, the seed and N, so every arm of a task (plain, runtime, placebo: the same ids in the same
order) scores the same examples. The indices go to lm-eval as its ``samples``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

LIMIT_SEED = 0  # the draw's seed: fixed, so two runs with one limit score the same examples


def limit_count(limit: int | float, rows: int) -> int:
    """The number of rows a limit asks for: a count, or a fraction of the rows (rounded up, as lm-eval does)."""
    if isinstance(limit, float) and limit < 1:
        return min(rows, math.ceil(limit * rows))
    return min(rows, int(limit))


def spread_sample(trajectory_ids: Sequence[str], limit: int | float, seed: int = LIMIT_SEED) -> list[int]:
    """The row indices (sorted) of a ``limit``-row sample of a task whose rows belong to ``trajectory_ids``."""
    wanted = limit_count(limit, len(trajectory_ids))
    if wanted >= len(trajectory_ids):
        return list(range(len(trajectory_ids)))
    rng = random.Random(f"{seed}:{wanted}")  # str seeds hash with SHA-512: stable across processes
    rows: dict[str, list[int]] = {}
    for index, trajectory in enumerate(trajectory_ids):
        rows.setdefault(trajectory, []).append(index)
    order = sorted(rows)
    rng.shuffle(order)
    sequence: list[int] = []
    for trajectory in order:
        mine = rows[trajectory]
        rng.shuffle(mine)
        sequence.extend(mine)
    step = len(sequence) / wanted
    start = rng.random() * step
    return sorted(sequence[int(start + k * step)] for k in range(wanted))
