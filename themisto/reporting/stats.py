"""Uncertainty and significance for per-example scores.

- :func:`bootstrap_ci`: percentile bootstrap 95% CI of a mean.
- :func:`paired_bootstrap_ci`: the same for the mean of paired differences.
- :func:`sign_flip_p_value`: two-sided paired permutation test of a mean difference.
- :func:`mcnemar`: McNemar's test for paired binary outcomes (e.g. exact match).
- :func:`minimum_detectable_effect`: the smallest paired mean difference the
  sample size detects with the usual alpha and power.

Every random procedure takes a ``seed`` and returns the same figures for the
same seed and input. Resampling is vectorised with numpy and done in chunks so
memory stays bounded (about :data:`_CHUNK_CELLS` numbers at a time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
# Largest number of non-zero differences whose 2**n sign patterns are enumerated
# exactly (65,536 patterns); above it the permutation test is Monte Carlo.
EXACT_SIGN_FLIP_MAX_N = 16
# Below this many discordant pairs McNemar uses the exact binomial test, where
# the chi-square approximation is poor (the common rule of thumb, b + c < 25).
MCNEMAR_EXACT_BELOW = 25
# Resampling works on (rows x n) blocks of at most this many cells (~32 MB of float64).
_CHUNK_CELLS = 4_000_000

ArrayLike = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval (``nan`` when undefined)."""

    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class McNemarResult:
    """McNemar's test: discordant counts, the statistic and the two-sided p-value.

    ``only_a`` counts pairs where only the first condition succeeded, ``only_b``
    pairs where only the second did. ``method`` is ``"exact"`` (binomial, the
    statistic is ``min(only_a, only_b)``), ``"chi2"`` (continuity-corrected
    chi-square with 1 df) or ``"none"`` (no discordant pair: p = 1).
    """

    only_a: int
    only_b: int
    statistic: float
    p_value: float
    method: str


def _as_vector(values: ArrayLike) -> np.ndarray:
    """A 1-D float64 array of the values, rejecting other shapes and non-finite numbers."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D sequence of numbers, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("values must be finite numbers")
    return array


def _chunk_rows(n: int) -> int:
    """Resamples per block so one block holds at most ``_CHUNK_CELLS`` numbers."""
    return max(1, _CHUNK_CELLS // max(n, 1))


def bootstrap_means(values: ArrayLike, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The means of ``resamples`` bootstrap resamples (with replacement, same size)."""
    data = _as_vector(values)
    n = len(data)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    step = _chunk_rows(n)
    for start in range(0, resamples, step):
        rows = min(step, resamples - start)
        means[start : start + rows] = data[rng.integers(0, n, size=(rows, n))].mean(axis=1)
    return means


def bootstrap_ci(
    values: ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The mean with its percentile-bootstrap confidence interval.

    Empty input gives ``nan`` everywhere; a single value gives a zero-width interval.
    """
    data = _as_vector(values)
    if len(data) == 0:
        return Interval(math.nan, math.nan, math.nan)
    tail = (1.0 - confidence) / 2.0 * 100.0
    means = bootstrap_means(data, resamples=resamples, seed=seed)
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return Interval(float(data.mean()), float(low), float(high))


def paired_differences(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Per-example ``b - a`` of two equally long, aligned score vectors."""
    first, second = _as_vector(a), _as_vector(b)
    if first.shape != second.shape:
        raise ValueError(f"paired samples differ in length: {len(first)} vs {len(second)}")
    return second - first


def paired_bootstrap_ci(
    a: ArrayLike,
    b: ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Mean of ``b - a`` over paired examples with its bootstrap CI.

    Resampling examples and taking both scores of each is the same as
    resampling the per-example differences, so this bootstraps the differences.
    """
    differences = paired_differences(a, b)
    return bootstrap_ci(differences, confidence=confidence, resamples=resamples, seed=seed)


def sign_flip_p_value(differences: ArrayLike, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> float:
    """Two-sided paired permutation p-value of ``mean(differences) != 0``.

    Under the null hypothesis each difference is as likely to have the opposite
    sign. The statistic is ``|sum(d)|``; zero differences cannot change it and
    are dropped. With at most :data:`EXACT_SIGN_FLIP_MAX_N` non-zero differences
    all sign patterns are enumerated (exact p); otherwise ``resamples`` random
    patterns give the Monte Carlo estimate ``(1 + hits) / (1 + resamples)``,
    which never returns 0. No non-zero difference gives p = 1.
    """
    data = _as_vector(differences)
    nonzero = data[data != 0.0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    observed = abs(nonzero.sum())
    # Sums of the same numbers in another order may differ in the last bits; a
    # relative tolerance keeps exact ties (e.g. 0/1 differences) counted as ties.
    threshold = observed - 1e-9 * np.abs(nonzero).sum()
    if n <= EXACT_SIGN_FLIP_MAX_N:
        patterns = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        sums = np.abs((1 - 2 * patterns) @ nonzero)
        return float(np.count_nonzero(sums >= threshold) / 2**n)
    rng = np.random.default_rng(seed)
    hits = 0
    step = _chunk_rows(n)
    for start in range(0, resamples, step):
        rows = min(step, resamples - start)
        signs = rng.integers(0, 2, size=(rows, n), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ nonzero) >= threshold))
    return (1 + hits) / (1 + resamples)


def _binary(values: ArrayLike, name: str) -> np.ndarray:
    """The values as booleans, rejecting anything but 0 and 1."""
    data = _as_vector(values)
    if not np.all((data == 0.0) | (data == 1.0)):
        raise ValueError(f"{name} must hold only 0 and 1")
    return data == 1.0


def mcnemar(a: ArrayLike, b: ArrayLike) -> McNemarResult:
    """McNemar's test of paired binary outcomes ``a`` and ``b`` (0/1 per example).

    With ``n = only_a + only_b`` discordant pairs: for ``n <`` :data:`MCNEMAR_EXACT_BELOW`
    the exact two-sided binomial test, ``p = min(1, 2 * P(X <= min(only_a, only_b)))``
    with ``X ~ Binomial(n, 1/2)``; otherwise the chi-square statistic with
    continuity correction ``(|only_a - only_b| - 1)**2 / n`` on 1 degree of freedom.
    """
    first, second = _binary(a, "a"), _binary(b, "b")
    if first.shape != second.shape:
        raise ValueError(f"paired samples differ in length: {len(first)} vs {len(second)}")
    only_a = int(np.count_nonzero(first & ~second))
    only_b = int(np.count_nonzero(~first & second))
    discordant = only_a + only_b
    if discordant == 0:
        return McNemarResult(only_a, only_b, 0.0, 1.0, "none")
    if discordant < MCNEMAR_EXACT_BELOW:
        smaller = min(only_a, only_b)
        tail = sum(math.comb(discordant, k) for k in range(smaller + 1)) / 2**discordant
        return McNemarResult(only_a, only_b, float(smaller), min(1.0, 2.0 * tail), "exact")
    statistic = (abs(only_a - only_b) - 1) ** 2 / discordant
    # The chi-square survival function with 1 df is erfc(sqrt(x / 2)).
    return McNemarResult(only_a, only_b, statistic, math.erfc(math.sqrt(statistic / 2.0)), "chi2")


def minimum_detectable_effect(differences: ArrayLike, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean paired difference detected with the given power.

    Normal approximation for a two-sided paired test at level ``alpha``:
    ``MDE = (z[1 - alpha/2] + z[power]) * sd(d) / sqrt(n)``, with ``sd`` the
    sample standard deviation (ddof 1) of the paired differences ``d``
    (about ``2.80 * sd / sqrt(n)`` at alpha 0.05, power 0.8). ``nan`` below 2 pairs.
    """
    data = _as_vector(differences)
    n = len(data)
    if n < 2:
        return math.nan
    normal = NormalDist()
    z_sum = normal.inv_cdf(1.0 - alpha / 2.0) + normal.inv_cdf(power)
    return float(z_sum * data.std(ddof=1) / math.sqrt(n))
