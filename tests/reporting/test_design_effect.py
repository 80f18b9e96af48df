"""The clustered variance, the design effect and the clustered MDE agree with closed forms and with simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from themisto.reporting.stats import (
    bootstrap_means,
    clustered_variance_of_mean,
    design_effect,
    minimum_detectable_effect,
)


def _clustered_sample(groups: int, size: int, correlation: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Values of ``groups`` clusters of ``size`` examples with the given intra-cluster correlation (unit variance)."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0.0, math.sqrt(correlation), groups)
    values = np.repeat(shared, size) + rng.normal(0.0, math.sqrt(1.0 - correlation), groups * size)
    return values, np.repeat(np.arange(groups), size)


def _sandwich_variance(values: np.ndarray, clusters: np.ndarray) -> float:
    """The cluster-robust variance of an intercept-only least-squares fit, written as the textbook sandwich."""
    design = np.ones((len(values), 1))
    (coefficient,), *_ = np.linalg.lstsq(design, values, rcond=None)
    residuals = values - coefficient
    bread = np.linalg.inv(design.T @ design)
    labels = np.unique(clusters)
    scores = [design[clusters == c].T @ residuals[clusters == c] for c in labels]
    meat = sum(np.outer(score, score) for score in scores)
    groups = len(labels)
    return float((groups / (groups - 1) * bread @ meat @ bread)[0, 0])


def test_clustered_variance_is_the_cluster_robust_sandwich() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(size=97)
    clusters = rng.integers(0, 11, size=97)  # unequal cluster sizes
    assert clustered_variance_of_mean(values, clusters) == pytest.approx(
        _sandwich_variance(values, clusters), rel=1e-12
    )


def test_one_example_per_cluster_is_the_independent_case() -> None:
    values = np.random.default_rng(2).normal(size=40)
    clusters = [f"t{i}" for i in range(40)]
    assert design_effect(values, clusters) == pytest.approx(1.0, rel=1e-12)
    assert minimum_detectable_effect(values, clusters=clusters) == pytest.approx(minimum_detectable_effect(values))
    # The independent MDE from scipy's standard error of the mean.
    expected = (scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)) * scipy_stats.sem(values)
    assert minimum_detectable_effect(values) == pytest.approx(expected, rel=1e-9)


def test_clusters_of_identical_examples_count_once() -> None:
    # G clusters of m equal values: N examples hold only G independent numbers, deff = (N - 1) / (G - 1).
    groups, size = 8, 5
    values = np.repeat(np.random.default_rng(3).normal(size=groups), size)
    clusters = np.repeat(np.arange(groups), size)
    assert design_effect(values, clusters) == pytest.approx((groups * size - 1) / (groups - 1))
    # The MDE is then the one of the G cluster means.
    cluster_means = values[::size]
    z = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)
    expected = z * math.sqrt(groups / (groups - 1) * np.var(cluster_means) / groups)
    assert minimum_detectable_effect(values, clusters=clusters) == pytest.approx(expected, rel=1e-12)


def test_estimated_design_effect_follows_kish_on_average() -> None:
    # Equal clusters of m with intra-cluster correlation rho: deff = 1 + (m - 1) rho.
    for size, correlation in ((10, 0.3), (4, 0.0), (20, 0.1)):
        estimates = [design_effect(*_clustered_sample(60, size, correlation, seed)) for seed in range(200)]
        assert np.mean(estimates) == pytest.approx(1 + (size - 1) * correlation, rel=0.1)


def test_clustered_variance_matches_the_cluster_bootstrap() -> None:
    values, clusters = _clustered_sample(40, 6, 0.4, seed=4)
    spread = bootstrap_means(values, clusters=clusters, resamples=20_000).var()
    # The bootstrap lacks the G / (G - 1) factor.
    assert spread == pytest.approx(clustered_variance_of_mean(values, clusters) * 39 / 40, rel=0.05)


def test_the_clustered_mde_keeps_its_power_where_the_independent_one_loses_it() -> None:
    # A true effect of the size each MDE names, tested with the trajectory sign flip's normal form.
    size, correlation, groups = 10, 0.3, 40
    z_alpha = scipy_stats.norm.ppf(0.975)
    # Each MDE as a reader would get it from one run, averaged over runs (one run's spread is noisy).
    samples = [_clustered_sample(groups, size, correlation, seed) for seed in range(50)]
    clustered_mde = float(np.mean([minimum_detectable_effect(v, clusters=c) for v, c in samples]))
    independent_mde = float(np.mean([minimum_detectable_effect(v) for v, _ in samples]))
    assert clustered_mde > 1.5 * independent_mde

    def power(effect: float) -> float:
        hits = 0
        for seed in range(400):
            values, labels = _clustered_sample(groups, size, correlation, seed=100 + seed)
            values = values + effect
            hits += abs(values.mean()) / math.sqrt(clustered_variance_of_mean(values, labels)) > z_alpha
        return hits / 400

    assert power(clustered_mde) == pytest.approx(0.8, abs=0.08)
    assert power(independent_mde) < 0.5


def test_undefined_cases_are_nan() -> None:
    assert math.isnan(design_effect([1.0, 2.0, 3.0], ["a", "a", "a"]))
    assert math.isnan(design_effect([1.0, 1.0, 1.0], ["a", "b", "c"]))
    assert math.isnan(minimum_detectable_effect([1.0, 2.0], clusters=["a", "a"]))
    with pytest.raises(ValueError, match="one cluster label per example"):
        design_effect([1.0, 2.0], ["a"])
