"""How a report resamples: :class:`Resampling`, declared once for ``themisto report`` and the statistics.

Light on purpose (the standard library and :mod:`themisto.declaration`): the CLI builds its parser from it
without importing numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

from themisto.declaration import at_least, check_declared, option


@dataclass(frozen=True)
class Resampling:
    """The resamples and seed of every bootstrap and Monte Carlo permutation test of a report."""

    resamples: int = option(10_000, "bootstrap and Monte Carlo permutation resamples", metavar="N", check=at_least(1))
    # numpy's generators take no negative seed
    seed: int = option(0, "random seed of the resampling; same seed, same figures", metavar="N", check=at_least(0))

    def __post_init__(self) -> None:
        check_declared(self)
