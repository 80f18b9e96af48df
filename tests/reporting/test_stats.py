"""The statistics agree with scipy and behave as their definitions say on known cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from themisto.reporting.stats import (
    EXACT_SIGN_FLIP_MAX_N,
    MCNEMAR_EXACT_BELOW,
    bootstrap_ci,
    bootstrap_cis,
    bootstrap_means,
    cluster_totals,
    disagreement_mde,
    mcnemar,
    minimum_detectable_effect,
    paired_bootstrap_ci,
    sign_flip_p_value,
)


def _paired_scores(effect: float, n: int, seed: int, noise: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """Scores of n examples under two conditions; the second is better by ``effect`` on average."""
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(0.2, 0.8, n)
    a = np.clip(difficulty + rng.normal(0, noise, n), 0, 1)
    b = np.clip(difficulty + effect + rng.normal(0, noise, n), 0, 1)
    return a, b


def test_a_clear_paired_difference_is_significant() -> None:
    a, b = _paired_scores(effect=0.08, n=200, seed=1)
    difference = paired_bootstrap_ci(a, b)
    assert difference.low > 0
    assert difference.estimate == pytest.approx(float(np.mean(b - a)))
    assert sign_flip_p_value(b - a) < 0.001
    assert minimum_detectable_effect(b - a) < difference.estimate


def test_no_paired_difference_is_not_significant() -> None:
    a, b = _paired_scores(effect=0.0, n=200, seed=2)
    difference = paired_bootstrap_ci(a, b)
    assert difference.low < 0 < difference.high
    assert sign_flip_p_value(b - a) > 0.05
    assert minimum_detectable_effect(b - a) > abs(difference.estimate)


def test_pairing_matters_where_example_difficulty_varies() -> None:
    # The same small effect: hidden by the spread of difficulty when the two
    # conditions are treated as independent, evident when they are paired.
    a, b = _paired_scores(effect=0.03, n=300, seed=3, noise=0.05)
    independent_low = bootstrap_ci(b).low - bootstrap_ci(a).high
    assert independent_low < 0
    assert paired_bootstrap_ci(a, b).low > 0


@pytest.mark.parametrize("n", [2, 3, 5, 9, EXACT_SIGN_FLIP_MAX_N])
def test_exact_sign_flip_matches_scipy_permutation_test(n: int) -> None:
    rng = np.random.default_rng(n)
    differences = np.round(rng.normal(0.3, 1.0, n), 2)
    expected = scipy_stats.permutation_test(
        (differences,),
        np.sum,
        permutation_type="samples",
        n_resamples=np.inf,
        alternative="two-sided",
    ).pvalue
    assert sign_flip_p_value(differences) == pytest.approx(expected, abs=1e-12)


def test_exact_sign_flip_counts_ties_of_binary_differences() -> None:
    # Differences of exact-match scores: 4 wins, 1 loss, 3 ties. |sum| >= 3 happens
    # for the 2 patterns with all five non-zero signs alike and the 10 with one
    # flipped sign, sums +-5 and +-3: 12 of 32.
    differences = [1, 1, 1, 1, -1, 0, 0, 0]
    assert sign_flip_p_value(differences) == pytest.approx(12 / 32)


@pytest.mark.slow
def test_monte_carlo_sign_flip_approximates_the_exact_p_value() -> None:
    n = EXACT_SIGN_FLIP_MAX_N + 2  # Monte Carlo here, still cheap to enumerate in scipy
    rng = np.random.default_rng(7)
    differences = rng.normal(0.35, 1.0, n)
    exact = scipy_stats.permutation_test(
        (differences,),
        np.sum,
        permutation_type="samples",
        n_resamples=np.inf,
        alternative="two-sided",
    ).pvalue
    assert 0.01 < exact < 0.5
    estimate = sign_flip_p_value(differences, resamples=20_000, seed=3)
    assert estimate == pytest.approx(exact, abs=0.015)


def test_sign_flip_edge_cases() -> None:
    assert sign_flip_p_value([0.0, 0.0, 0.0]) == 1.0
    assert sign_flip_p_value([]) == 1.0
    # A Monte Carlo p-value is never 0, however extreme the data.
    assert sign_flip_p_value(np.linspace(1.0, 2.0, 100), resamples=999) == pytest.approx(1 / 1000)
    # Nor is the exact p-value of one-magnitude differences: 2 of the 2**100 sign patterns are as extreme.
    assert sign_flip_p_value(np.ones(100)) == pytest.approx(2 / 2**100, rel=1e-12)


@pytest.mark.parametrize("n", [5, EXACT_SIGN_FLIP_MAX_N, 40, 300])
def test_sign_flip_of_0_1_differences_is_exact_and_matches_mcnemar(n: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.integers(0, 2, size=n), (rng.uniform(size=n) < 0.7).astype(int)
    differences = (b - a).astype(float)
    signs = differences[differences != 0]
    expected = scipy_stats.binomtest(int(np.sum(signs > 0)), len(signs), 0.5).pvalue
    assert sign_flip_p_value(differences) == pytest.approx(expected, rel=1e-12)
    # The same seed-free value whatever the resamples: nothing is drawn.
    assert sign_flip_p_value(differences, resamples=10, seed=5) == sign_flip_p_value(differences)
    if len(signs) <= EXACT_SIGN_FLIP_MAX_N:  # equal to enumerating every sign pattern
        exact = scipy_stats.permutation_test(
            (signs,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
        ).pvalue
        assert sign_flip_p_value(differences) == pytest.approx(exact, rel=1e-12)


def _binary_pairs(only_a: int, only_b: int, both: int = 7, neither: int = 5) -> tuple[list, list]:
    """Paired 0/1 outcomes with the given discordant and concordant counts."""
    a = [1] * only_a + [0] * only_b + [1] * both + [0] * neither
    b = [0] * only_a + [1] * only_b + [1] * both + [0] * neither
    return a, b


@pytest.mark.parametrize(
    "only_a, only_b",
    [(0, 1), (1, 0), (3, 3), (2, 9), (0, 12), (10, 14), (12, 12), (0, 24)],
)
def test_mcnemar_exact_below_the_threshold_matches_scipy_binomtest(only_a: int, only_b: int) -> None:
    assert only_a + only_b < MCNEMAR_EXACT_BELOW
    result = mcnemar(*_binary_pairs(only_a, only_b))
    expected = scipy_stats.binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue
    assert result.method == "exact"
    assert (result.only_a, result.only_b) == (only_a, only_b)
    assert result.p_value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("only_a, only_b", [(0, 25), (12, 13), (20, 5), (30, 10), (100, 140), (7, 60)])
def test_mcnemar_chi_square_from_the_threshold_matches_scipy(only_a: int, only_b: int) -> None:
    result = mcnemar(*_binary_pairs(only_a, only_b))
    statistic = (abs(only_a - only_b) - 1) ** 2 / (only_a + only_b)
    assert result.method == "chi2"
    assert result.statistic == pytest.approx(statistic)
    assert result.p_value == pytest.approx(scipy_stats.chi2.sf(statistic, df=1), rel=1e-9)


def test_mcnemar_without_discordant_pairs_and_bad_input() -> None:
    result = mcnemar([1, 0, 1], [1, 0, 1])
    assert (result.p_value, result.method) == (1.0, "none")
    with pytest.raises(ValueError, match="only 0 and 1"):
        mcnemar([0.5, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar([1, 0], [1])


def test_bootstrap_is_deterministic_under_a_seed() -> None:
    values = np.random.default_rng(5).uniform(size=80)
    assert bootstrap_ci(values, seed=42) == bootstrap_ci(values, seed=42)
    assert bootstrap_ci(values, seed=42) != bootstrap_ci(values, seed=43)
    assert sign_flip_p_value(values - 0.45, seed=1) == sign_flip_p_value(values - 0.45, seed=1)


def test_bootstrap_chunks_do_not_change_the_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.random.default_rng(6).uniform(size=50)
    whole = bootstrap_means(values, resamples=500, seed=9)
    monkeypatch.setattr("themisto.reporting.stats._CHUNK_CELLS", 50 * 7)  # 7 resamples per block
    monkeypatch.setattr("themisto.reporting.stats._CACHED_CELLS", 0)  # blocks drawn anew, not the cached whole
    assert np.array_equal(bootstrap_means(values, resamples=500, seed=9)[:7], whole[:7])
    assert bootstrap_means(values, resamples=500, seed=9).shape == (500,)
    assert np.allclose(bootstrap_means(values, resamples=500, seed=9), whole, rtol=0, atol=1e-12)


def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap() -> None:
    values = np.random.default_rng(8).exponential(size=120)
    ours = bootstrap_ci(values, resamples=20_000)
    theirs = scipy_stats.bootstrap(
        (values,), np.mean, method="percentile", n_resamples=20_000, random_state=0
    ).confidence_interval
    assert ours.estimate == pytest.approx(values.mean())
    assert ours.low == pytest.approx(theirs.low, abs=0.02)
    assert ours.high == pytest.approx(theirs.high, abs=0.02)


def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(10)
    trials, true_mean = 300, 0.3
    covered = 0
    for trial in range(trials):
        sample = (rng.uniform(size=60) < true_mean).astype(float)
        interval = bootstrap_ci(sample, resamples=1_000, seed=trial)
        covered += interval.low <= true_mean <= interval.high
    assert 0.89 <= covered / trials <= 0.99


def test_bootstrap_ci_small_inputs() -> None:
    empty = bootstrap_ci([])
    assert math.isnan(empty.estimate) and math.isnan(empty.low) and math.isnan(empty.high)
    single = bootstrap_ci([0.25])
    assert (single.estimate, single.low, single.high) == (0.25, 0.25, 0.25)
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([0.1, float("nan")])


def test_minimum_detectable_effect_formula_and_power() -> None:
    rng = np.random.default_rng(11)
    differences = rng.normal(0.0, 0.4, 150)
    z_sum = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)
    mde = minimum_detectable_effect(differences)
    assert mde == pytest.approx(z_sum * differences.std(ddof=1) / math.sqrt(150), rel=1e-9)
    # At a true effect equal to the MDE, a two-sided paired z-test at 0.05 rejects
    # in about 80% of repeated experiments.
    sd = 0.4
    effect = minimum_detectable_effect(rng.normal(0.0, sd, 100_000)) * math.sqrt(100_000 / 150)
    experiments = rng.normal(effect, sd, size=(4_000, 150))
    z = experiments.mean(axis=1) / (sd / math.sqrt(150))
    assert np.mean(np.abs(z) > 1.959964) == pytest.approx(0.8, abs=0.03)
    assert minimum_detectable_effect(differences[:40]) > mde  # fewer pairs, larger MDE
    assert math.isnan(minimum_detectable_effect([0.3]))


def test_paired_bootstrap_rejects_unaligned_samples() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap_ci([0.1, 0.2], [0.3])


def _clustered_scores(clusters: int, size: int, seed: int, spread: float = 0.35) -> tuple[np.ndarray, np.ndarray]:
    """0/1 scores of ``clusters`` groups of ``size`` examples whose success rates differ by group, and group labels."""
    rng = np.random.default_rng(seed)
    rates = np.clip(0.5 + rng.normal(0, spread, clusters), 0.02, 0.98)
    labels = np.repeat([f"nb{c:02d}" for c in range(clusters)], size)
    return (rng.uniform(size=clusters * size) < np.repeat(rates, size)).astype(float), labels


def test_cluster_bootstrap_with_one_example_per_cluster_is_the_example_bootstrap() -> None:
    values = np.random.default_rng(12).uniform(size=90)
    labels = [f"t{i:03d}" for i in range(90)]  # sorted labels keep the examples' order
    assert bootstrap_ci(values, clusters=labels, resamples=3_000) == bootstrap_ci(values, resamples=3_000)


def test_every_column_is_resampled_with_the_same_draws_as_alone() -> None:
    rng = np.random.default_rng(13)
    matrix = np.column_stack([rng.uniform(size=70), rng.integers(0, 2, 70), rng.normal(size=70)])
    labels = rng.integers(0, 9, 70)
    for clusters in (None, labels):
        together = bootstrap_cis(matrix, clusters=clusters, resamples=2_000, seed=4)
        alone = [bootstrap_ci(matrix[:, j], clusters=clusters, resamples=2_000, seed=4) for j in range(3)]
        for a, b in zip(together, alone):
            assert a.estimate == pytest.approx(b.estimate) and a.low == pytest.approx(b.low)
            assert a.high == pytest.approx(b.high)


def test_cluster_bootstrap_agrees_with_scipy_resampling_cluster_totals() -> None:
    values, labels = _clustered_scores(clusters=14, size=25, seed=14)
    labels[:40] = "nb00"  # clusters of unequal size: the mean is a ratio of resampled totals
    ours = bootstrap_ci(values, clusters=labels, resamples=20_000)
    sums, sizes = cluster_totals(values, labels)
    theirs = scipy_stats.bootstrap(
        (sums, sizes),
        lambda s, n, axis=-1: s.sum(axis=axis) / n.sum(axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=20_000,
        rng=np.random.default_rng(0),
    ).confidence_interval
    assert ours.estimate == pytest.approx(values.mean())
    assert ours.low == pytest.approx(theirs.low, abs=0.01)
    assert ours.high == pytest.approx(theirs.high, abs=0.01)


def test_cluster_bootstrap_covers_where_the_example_bootstrap_does_not() -> None:
    # Examples share their trajectory's success rate: treating them as independent
    # gives intervals that are too narrow and miss the true mean far too often.
    trials, covered_iid, covered_clustered, widths = 200, 0, 0, []
    for trial in range(trials):
        values, labels = _clustered_scores(clusters=12, size=15, seed=100 + trial)
        truth = 0.5  # the rates are symmetric around 0.5 before clipping at 0.02 and 0.98
        iid = bootstrap_ci(values, resamples=1_000, seed=trial)
        clustered = bootstrap_ci(values, clusters=labels, resamples=1_000, seed=trial)
        covered_iid += iid.low <= truth <= iid.high
        covered_clustered += clustered.low <= truth <= clustered.high
        widths.append((clustered.high - clustered.low) / (iid.high - iid.low))
    assert covered_iid / trials < 0.75
    assert covered_clustered / trials >= 0.85
    assert np.median(widths) > 1.5


def test_clustered_sign_flip_flips_whole_clusters_as_scipy_does() -> None:
    rng = np.random.default_rng(15)
    differences = rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0], size=120)
    labels = rng.integers(0, 11, size=120)
    sums, _ = cluster_totals(differences, labels)
    nonzero = sums[sums != 0]
    expected = scipy_stats.permutation_test(
        (nonzero,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    ).pvalue
    assert sign_flip_p_value(differences, clusters=labels) == pytest.approx(expected, abs=1e-12)
    # Far fewer independent units than examples: the clustered p-value is larger.
    assert sign_flip_p_value(differences, clusters=labels) > sign_flip_p_value(differences)


def test_cluster_labels_must_match_the_examples() -> None:
    with pytest.raises(ValueError, match="one cluster label per example"):
        bootstrap_ci([0.1, 0.2, 0.3], clusters=["a", "b"])


def test_disagreement_mde_closed_form_and_large_n_limit() -> None:
    z_a, z_b = scipy_stats.norm.ppf(0.975), scipy_stats.norm.ppf(0.8)
    for n, rate in [(200, 0.1), (60, 0.2), (5_000, 0.05)]:
        mde = disagreement_mde(n, rate)
        # The defining equation: sqrt(n) * MDE = z_a * sqrt(rate) + z_b * sqrt(rate - MDE**2).
        assert math.sqrt(n) * mde == pytest.approx(z_a * math.sqrt(rate) + z_b * math.sqrt(rate - mde**2))
    assert disagreement_mde(100_000, 0.1) == pytest.approx((z_a + z_b) * math.sqrt(0.1 / 100_000), rel=1e-3)
    # The report's table for the paper's 200-example split.
    assert [round(disagreement_mde(200, rate), 3) for rate in (0.05, 0.10, 0.20)] == [0.044, 0.062, 0.088]


def test_disagreement_mde_has_the_stated_power() -> None:
    # Pairs disagree at the given rate, and the disagreements lean the way of an
    # effect equal to the MDE: a two-sided test of the paired difference rejects
    # in about 80% of repeated experiments.
    rng = np.random.default_rng(16)
    for n, rate in [(2_000, 0.05), (400, 0.2)]:
        effect = disagreement_mde(n, rate)
        only_b, only_a, _ = rng.multinomial(n, [(rate + effect) / 2, (rate - effect) / 2, 1 - rate], size=20_000).T
        discordant = np.maximum(only_a + only_b, 1)
        z = (only_b - only_a) / np.sqrt(discordant)  # McNemar's statistic without continuity correction
        assert np.mean(np.abs(z) > scipy_stats.norm.ppf(0.975)) == pytest.approx(0.8, abs=0.02)


def test_disagreement_mde_is_never_zero() -> None:
    assert disagreement_mde(200, 0.05) < disagreement_mde(200, 0.1) < disagreement_mde(200, 0.2)
    assert disagreement_mde(1_000, 0.1) < disagreement_mde(200, 0.1)
    assert all(disagreement_mde(n, 0.1) > 0 for n in (100, 200, 10_000))
    assert math.isnan(disagreement_mde(200, 0.0))  # no pair can differ: no effect to detect
    assert math.isnan(disagreement_mde(10, 0.05))  # even an effect of the whole rate is not detectable
    with pytest.raises(ValueError, match="disagreement rate"):
        disagreement_mde(200, 1.5)
    with pytest.raises(ValueError, match="disagreement rate"):
        disagreement_mde(0, 0.1)
