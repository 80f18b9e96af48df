"""Uncertainty and significance for per-example scores.

- :func:`bootstrap_means`, :func:`bootstrap_ci`, :func:`bootstrap_cis`:
  percentile bootstrap 95% CIs of means, resampling examples or whole
  clusters (the trajectories examples come from).
- :func:`paired_bootstrap_ci`: the same for the mean of paired differences.
- :func:`sign_flip_p_value`: two-sided paired permutation test of a mean
  difference, flipping the sign of each example or of each whole cluster.
- :func:`mcnemar`: McNemar's test for paired binary outcomes (e.g. exact match).
- :func:`minimum_detectable_effect`: the smallest paired mean difference the
  observed spread of differences detects with the usual alpha and power;
  with clusters, widened by the :func:`design_effect` of the clustering.
- :func:`clustered_variance_of_mean`, :func:`design_effect`: the variance of a
  mean when examples come in clusters, and its ratio to the independent one.
- :func:`disagreement_mde`: the same for a binary metric, from the rate at
  which the two conditions disagree.

These are written here rather than taken from ``scipy.stats`` because
``bench/bench_stats.py``, run side by side, shows scipy materially slower on a
report's work for the same answers (tests compare each with
``scipy.stats.bootstrap(method="percentile")``,
``scipy.stats.permutation_test(permutation_type="samples")`` and
``scipy.stats.binomtest``): one bootstrap draw here serves every metric of a
task at once, the sign flips are one matrix product, and importing
``scipy.stats`` alone takes longer than a whole report.

Every random procedure takes a ``seed`` and returns the same figures for the
same seed and input. Resampling is vectorised with numpy and done in blocks of
about :data:`_CHUNK_CELLS` numbers; the draws for samples of up to
:data:`_CACHED_CELLS` numbers are kept (for the last four sizes) because a
report resamples many samples of the same size under one seed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import cast

import numpy as np

from themisto.reporting.resampling import Resampling

DEFAULT_RESAMPLES = Resampling().resamples
DEFAULT_SEED = Resampling().seed
# Largest number of non-zero differences whose 2**n sign patterns are enumerated
# exactly (65,536 patterns); above it the permutation test is Monte Carlo.
EXACT_SIGN_FLIP_MAX_N = 16
# Below this many discordant pairs McNemar uses the exact binomial test, where
# the chi-square approximation is poor (the common rule of thumb, b + c < 25).
MCNEMAR_EXACT_BELOW = 25
# Resampling works on blocks of at most this many cells (0.8 MB of float64):
# small enough to stay in the CPU cache, which makes the counting faster than
# larger blocks do (bench/bench_stats.py).
_CHUNK_CELLS = 100_000
# Bootstrap weights up to this many cells (16 MB; 10,000 resamples of 200
# examples) are kept for the next sample of the same size.
_CACHED_CELLS = 2_000_000

ArrayLike = Sequence[float] | np.ndarray
Clusters = Sequence[Hashable] | np.ndarray


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


def _as_columns(values: ArrayLike) -> tuple[np.ndarray, bool]:
    """An (n, m) float64 matrix of the values (a vector becomes one column) and whether it was a vector."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 1:
        return _as_vector(array)[:, None], True
    if array.ndim != 2:
        raise ValueError(f"expected numbers per example (1-D) or per example and metric (2-D), got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("values must be finite numbers")
    return array, False


def cluster_totals(values: ArrayLike, clusters: Clusters) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster (in sorted label order) the sum of the values and the number of examples.

    ``values`` is a vector or an (n, m) matrix; the sums have the same number of columns.
    """
    data, vector = _as_columns(values)
    labels = np.asarray(clusters)
    if labels.shape != (len(data),):
        raise ValueError(f"expected one cluster label per example: {labels.shape} labels for {len(data)} examples")
    _, index = np.unique(labels, return_inverse=True)
    sizes = np.bincount(index)
    sums = np.stack([np.bincount(index, weights=column, minlength=len(sizes)) for column in data.T], axis=1)
    return (sums[:, 0] if vector else sums), sizes


def _chunk_rows(cells_per_row: int) -> int:
    """Resamples per block so one block holds at most ``_CHUNK_CELLS`` numbers."""
    return max(1, _CHUNK_CELLS // max(cells_per_row, 1))


def _draw_weights(count: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """Blocks of bootstrap weights: per resample, how often it drew each of ``count`` items (as float64)."""
    rng = np.random.default_rng(seed)
    step = _chunk_rows(count)
    for start in range(0, resamples, step):
        rows = min(step, resamples - start)
        drawn = rng.integers(0, count, size=(rows, count))
        # Counting the draws lets one matrix product give every column's
        # resampled total, cheaper than gathering the drawn values per column.
        offsets = np.arange(rows)[:, None] * count
        weights = np.bincount((drawn + offsets).ravel(), minlength=rows * count).reshape(rows, count)
        yield weights.astype(np.float64)


@functools.lru_cache(maxsize=4)
def _cached_weights(count: int, resamples: int, seed: int) -> np.ndarray:
    """All weights of one (count, resamples, seed), read-only: a report asks for the same ones per model and task."""
    weights = np.concatenate(list(_draw_weights(count, resamples, seed)))
    weights.flags.writeable = False
    return weights


def _weight_blocks(count: int, resamples: int, seed: int) -> Iterable[np.ndarray]:
    """The bootstrap weights in blocks; kept in memory for reuse when they are small."""
    if count * resamples <= _CACHED_CELLS:
        return [_cached_weights(count, resamples, seed)]
    return _draw_weights(count, resamples, seed)


def bootstrap_means(
    values: ArrayLike,
    *,
    clusters: Clusters | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> np.ndarray:
    """The means of ``resamples`` bootstrap resamples: shape (resamples,), or (resamples, m) for an (n, m) matrix.

    Without ``clusters`` a resample draws n examples with replacement. With
    ``clusters`` (one label per example, e.g. its trajectory) it draws as many
    whole clusters as there are, with replacement, and takes the mean over all
    examples of the drawn clusters: the cluster bootstrap, which keeps the
    correlation of examples from one cluster. Every column of a matrix is
    resampled with the same draws, and so is every sample of the same size
    under the same seed.
    """
    data, vector = _as_columns(values)
    if len(data) == 0:
        raise ValueError("cannot bootstrap an empty sample")
    if clusters is None:
        sums, sizes = data, None
    else:
        sums, sizes = cluster_totals(data, clusters)
    count = len(sums)
    blocks = [
        (weights @ sums) / (count if sizes is None else (weights @ sizes)[:, None])
        for weights in _weight_blocks(count, resamples, seed)
    ]
    means = np.concatenate(blocks)
    return means[:, 0] if vector else means


def bootstrap_cis(
    values: ArrayLike,
    *,
    clusters: Clusters | None = None,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[Interval]:
    """Each column's mean with its percentile-bootstrap CI, all columns from the same resamples.

    ``values`` is (n, m): n examples, m metrics. No example gives ``nan``
    everywhere; a single example (or a single cluster) a zero-width interval.
    """
    data, _ = _as_columns(values)
    if len(data) == 0:
        return [Interval(math.nan, math.nan, math.nan)] * data.shape[1]
    tail = (1.0 - confidence) / 2.0 * 100.0
    means = bootstrap_means(data, clusters=clusters, resamples=resamples, seed=seed)
    lows, highs = np.percentile(means, [tail, 100.0 - tail], axis=0)
    return [
        Interval(float(estimate), float(low), float(high))
        for estimate, low, high in zip(data.mean(axis=0), lows, highs)
    ]


def bootstrap_ci(
    values: ArrayLike,
    *,
    clusters: Clusters | None = None,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The mean with its percentile-bootstrap confidence interval (see :func:`bootstrap_cis`)."""
    data = _as_vector(values)
    (interval,) = bootstrap_cis(data[:, None], clusters=clusters, confidence=confidence, resamples=resamples, seed=seed)
    return interval


def paired_differences(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Per-example ``b - a`` of two equally long, aligned score vectors."""
    first, second = _as_vector(a), _as_vector(b)
    if first.shape != second.shape:
        raise ValueError(f"paired samples differ in length: {len(first)} vs {len(second)}")
    return cast(np.ndarray, second - first)


def paired_bootstrap_ci(
    a: ArrayLike,
    b: ArrayLike,
    *,
    clusters: Clusters | None = None,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Mean of ``b - a`` over paired examples with its bootstrap CI.

    Resampling examples (or clusters) and taking both scores of each is the
    same as resampling the per-example differences, so this bootstraps the
    differences.
    """
    differences = paired_differences(a, b)
    return bootstrap_ci(differences, clusters=clusters, confidence=confidence, resamples=resamples, seed=seed)


def sign_flip_p_value(
    differences: ArrayLike,
    *,
    clusters: Clusters | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> float:
    """Two-sided paired permutation p-value of ``mean(differences) != 0``.

    Under the null hypothesis each difference is as likely to have the opposite
    sign. The statistic is ``|sum(d)|``; zero differences cannot change it and
    are dropped. With ``clusters`` the signs of whole clusters flip together
    (the cluster's examples share whatever made them differ), so the test runs
    on the per-cluster sums. Non-zero terms of one magnitude (a 0/1 metric's
    differences) give the exact binomial p-value; otherwise, with at most
    :data:`EXACT_SIGN_FLIP_MAX_N` non-zero terms, all sign patterns are
    enumerated (exact p), and beyond that ``resamples`` random patterns give
    the Monte Carlo estimate ``(1 + hits) / (1 + resamples)``, which never
    returns 0. No non-zero term gives p = 1.
    """
    data = _as_vector(differences)
    if clusters is not None and len(data):
        data, _ = cluster_totals(data, clusters)
    nonzero = data[data != 0.0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    if np.all(np.abs(nonzero) == abs(nonzero[0])):
        # Equal magnitudes (the ±1 differences of a 0/1 metric): the number of
        # positive signs is Binomial(n, 1/2) under the null, so the p-value is
        # exact for any n; it is McNemar's exact test.
        return _binomial_two_sided(int(np.count_nonzero(nonzero > 0)), n)
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


def _binomial_two_sided(successes: int, n: int) -> float:
    """Exact two-sided binomial test at 1/2: ``min(1, 2 * P(X <= min(k, n - k)))`` with ``X ~ Binomial(n, 1/2)``."""
    smaller = min(successes, n - successes)
    term, total = 1, 1  # C(n, 0); then C(n, k + 1) = C(n, k) * (n - k) / (k + 1), exact in integers
    for k in range(smaller):
        term = term * (n - k) // (k + 1)
        total += term
    return cast(float, min(1.0, 2.0 * (total / 2**n)))  # int ** int is Any to mypy


def _binary(values: ArrayLike, name: str) -> np.ndarray:
    """The values as booleans, rejecting anything but 0 and 1."""
    data = _as_vector(values)
    if not np.all((data == 0.0) | (data == 1.0)):
        raise ValueError(f"{name} must hold only 0 and 1")
    return cast(np.ndarray, data == 1.0)


def mcnemar(a: ArrayLike, b: ArrayLike) -> McNemarResult:
    """McNemar's test of paired binary outcomes ``a`` and ``b`` (0/1 per example).

    With ``n = only_a + only_b`` discordant pairs: for ``n <`` :data:`MCNEMAR_EXACT_BELOW`
    the exact two-sided binomial test, ``p = min(1, 2 * P(X <= min(only_a, only_b)))``
    with ``X ~ Binomial(n, 1/2)``; otherwise the chi-square
    statistic with continuity correction ``(|only_a - only_b| - 1)**2 / n`` on
    1 degree of freedom.
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
        return McNemarResult(only_a, only_b, float(smaller), _binomial_two_sided(smaller, discordant), "exact")
    statistic = (abs(only_a - only_b) - 1) ** 2 / discordant
    # The chi-square survival function with 1 df is erfc(sqrt(x / 2)).
    return McNemarResult(only_a, only_b, statistic, math.erfc(math.sqrt(statistic / 2.0)), "chi2")


def _z_quantiles(alpha: float, power: float) -> tuple[float, float]:
    """``z[1 - alpha/2]`` and ``z[power]`` of the standard normal distribution."""
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    normal = NormalDist()
    return normal.inv_cdf(1.0 - alpha / 2.0), normal.inv_cdf(power)


def clustered_variance_of_mean(values: ArrayLike, clusters: Clusters) -> float:
    """Variance of the mean of ``values`` when whole clusters are the independent units.

    The mean ``ȳ = ΣT_c / N`` over ``G`` clusters with totals ``T_c`` and sizes
    ``n_c`` is a ratio estimator; its linearised (sandwich) variance is
    ``G / (G - 1) * Σ (T_c - ȳ n_c)**2 / N**2``, the cluster-robust variance of
    an intercept-only regression with the usual ``G / (G - 1)`` small-sample
    factor. With one example per cluster it is ``s**2 / N``, the independent
    variance. ``nan`` below 2 clusters.
    """
    data = _as_vector(values)
    totals, sizes = cluster_totals(data, clusters)
    groups = len(totals)
    if groups < 2:
        return math.nan
    residuals = totals - data.mean() * sizes
    return float(groups / (groups - 1) * np.sum(residuals**2) / len(data) ** 2)


def design_effect(values: ArrayLike, clusters: Clusters) -> float:
    """How many times the clustering inflates the variance of the mean: clustered over independent variance.

    Kish's design effect, estimated from the data rather than from an assumed
    intra-cluster correlation: :func:`clustered_variance_of_mean` divided by
    ``s**2 / N`` (``s`` the sample standard deviation, ddof 1). For clusters
    of ``m`` equal examples each it is ``(N - 1) / (G - 1)``, about ``m``; for
    one example per cluster exactly 1; below 1 where clusters differ less
    than chance would make them. ``nan`` below 2 clusters or without spread.
    """
    data = _as_vector(values)
    if len(data) < 2:
        return math.nan
    independent = float(data.var(ddof=1)) / len(data)
    clustered = clustered_variance_of_mean(data, clusters)
    if independent == 0.0 or math.isnan(clustered):
        return math.nan
    return clustered / independent


def minimum_detectable_effect(
    differences: ArrayLike, *, clusters: Clusters | None = None, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Smallest true mean paired difference detected with the given power, from the observed spread.

    Normal approximation for a two-sided paired test at level ``alpha``:
    ``MDE = (z[1 - alpha/2] + z[power]) * sd(d) / sqrt(n)``, with ``sd`` the
    sample standard deviation (ddof 1) of the paired differences ``d``
    (about ``2.80 * sd / sqrt(n)`` at alpha 0.05, power 0.8). With
    ``clusters`` (the trajectory of each difference) the standard error is the
    clustered one, i.e. the MDE grows by ``sqrt(design_effect(d, clusters))``:
    examples of one trajectory carry less than independent ones. ``nan`` below
    2 pairs (or 2 clusters). Identical differences give 0: for a binary metric
    use :func:`disagreement_mde`, which does not depend on the observed spread.
    """
    data = _as_vector(differences)
    n = len(data)
    if n < 2:
        return math.nan
    z_alpha, z_power = _z_quantiles(alpha, power)
    variance = data.var(ddof=1) / n if clusters is None else clustered_variance_of_mean(data, clusters)
    return float((z_alpha + z_power) * math.sqrt(variance))


def disagreement_mde(n: int, disagreement: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true paired difference of a binary metric detected at a disagreement rate.

    Per example the two conditions score ``a, b`` in {0, 1} and ``d = b - a``.
    With ``p01 = P(a=0, b=1)`` and ``p10 = P(a=1, b=0)``, the disagreement rate
    is ``δ = p01 + p10`` and the effect ``Δ = E[d] = p01 - p10``; as ``d**2`` is
    1 exactly where the conditions disagree, ``E[d**2] = δ`` and
    ``Var(d) = δ - Δ**2`` (``δ`` under the null ``Δ = 0``). A two-sided test
    of the mean difference at level ``alpha`` (the normal form of McNemar's
    test) has power ``1 - β`` when
    ``sqrt(n) Δ = z_a sqrt(δ) + z_b sqrt(δ - Δ**2)``, with ``z_a = z[1 - alpha/2]``
    and ``z_b = z[1 - β]``. Squaring gives
    ``(n + z_b**2) Δ**2 - 2 sqrt(n) z_a sqrt(δ) Δ + (z_a**2 - z_b**2) δ = 0``,
    whose larger root is the MDE::

        Δ = sqrt(δ) (sqrt(n) z_a + z_b sqrt(n - z_a**2 + z_b**2)) / (n + z_b**2)

    about ``(z_a + z_b) sqrt(δ / n)`` (``2.80 sqrt(δ / n)`` at alpha 0.05,
    power 0.8) for large n. It depends on the disagreement rate, never on
    whether the observed differences happen to be all zero. ``nan`` when
    ``δ`` is 0 (no pair can differ, so there is no effect to detect) or the
    root exceeds ``δ`` (``|Δ| <= δ`` always: at this n no effect the rate
    allows reaches the power).
    """
    if n < 1 or not 0.0 <= disagreement <= 1.0:
        raise ValueError(f"need n >= 1 and a disagreement rate in [0, 1], got n={n}, rate={disagreement}")
    z_alpha, z_power = _z_quantiles(alpha, power)
    inner = n - z_alpha**2 + z_power**2
    if disagreement == 0.0 or inner < 0.0:
        return math.nan
    root = math.sqrt(disagreement) * (math.sqrt(n) * z_alpha + z_power * math.sqrt(inner)) / (n + z_power**2)
    return root if root <= disagreement else math.nan
