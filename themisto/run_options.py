"""How much of the work one run does, and with how many workers: :class:`RunOptions`, shared by record and exec-score.

Declared once (:func:`themisto.declaration.option`), so ``record`` and
``exec-score`` take the same ``--jobs`` and ``--shard``, with the same checks
and messages, and a Python caller of :func:`themisto.recording.record.record_source`
or :func:`themisto.evaluation.exec.exec_score` meets them too. A shard is
chosen by a stable hash of each trajectory id (:func:`shard_of`), so both
commands split a corpus alike.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol, TypeVar

from themisto.declaration import at_least, check_declared, option
from themisto.exceptions import InputError


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``; the range of I is the option's check."""
    index, slash, count = text.partition("/")
    if not (slash and index.strip().isdigit() and count.strip().isdigit()):
        raise InputError(f"{text!r} is not I/N with whole numbers, e.g. 0/4")
    return int(index), int(count)


def _shard_check(shard: tuple[int, int]) -> str | None:
    """What is wrong with a shard ``(index, count)``, if anything."""
    index, count = shard
    if count >= 1 and 0 <= index < count:
        return None
    return f"{index}/{count}: the index must be 0 to count-1 (shards are 0-based)"


@dataclass(frozen=True)
class RunOptions:
    """How many workers a run has, and which shard of the trajectories it does."""

    jobs: int = option(
        1,
        "work on N trajectories at once, each in its own kernel; with any N a trajectory that fails is reported"
        " and the others still finish, then the exit status is 2",
        metavar="N",
        check=at_least(1),
    )
    shard: tuple[int, int] | None = option(
        None,
        "do only shard I (0-based: 0 to N-1) of N, chosen by a stable hash of each trajectory id, so every"
        " trajectory falls in exactly one shard whatever the listing order",
        metavar="I/N",
        parse=parse_shard,
        check=_shard_check,
    )

    def __post_init__(self) -> None:
        check_declared(self)


def shard_of(trajectory_id: str, count: int) -> int:
    """The 0-based shard of ``count`` a trajectory belongs to: a stable hash of its id.

    A hash (not the position in a sorted listing) keeps a trajectory in the same
    shard when other sources are added to the corpus, so a sharded ``--resume``
    never moves work between machines; shards are balanced only on average.
    """
    digest = hashlib.sha256(trajectory_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


class Identified(Protocol):
    """Anything that names its trajectory: a source, a scored trajectory."""

    @property
    def trajectory_id(self) -> str: ...


Item = TypeVar("Item", bound=Identified)


def select_shard(items: list[Item], shard: tuple[int, int] | None) -> list[Item]:
    """The items of ``shard`` (``(index, count)``, checked by :class:`RunOptions`), in their given order; all for None."""
    if shard is None:
        return items
    index, count = shard
    return [item for item in items if shard_of(item.trajectory_id, count) == index]
