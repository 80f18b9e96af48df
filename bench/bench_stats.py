"""Statistics: the report's bootstrap, sign-flip and McNemar code against scipy.stats, side by side.

``themisto.reporting.stats`` uses scipy.stats wherever scipy gives the same
answer without being materially slower (more than :data:`MATERIAL` times our
time) on the work a report does; these rows decide it. Each pair runs on the
same seeded inputs, interleaved over several repetitions (median wall time),
and must give the same answer: bootstrap bounds within 0.01 (0.015 over a
report's many bounds), Monte Carlo p-values within five standard errors,
exact binomial p-values to 1e-12. The last rows time
``import scipy.stats`` in a fresh process and a whole report (``build_report``
and the Markdown) on a synthetic run of five models, four tasks and 200
examples with categories, duplicates and exec outcomes.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

from themisto.reporting import stats

REPO = Path(__file__).resolve().parent.parent
# scipy is "materially slower" above this ratio of its time to ours.
MATERIAL = 1.25
# A whole report of five models x four tasks x 200 examples, in process.
REPORT_TARGET_S = 2.0
N = 200
TRAJECTORIES = 11
METRICS = 4


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-example scores of four metrics (two 0/1, two in [0, 1]) and trajectory labels, as in a report."""
    rng = np.random.default_rng(seed)
    labels = np.sort(rng.integers(0, TRAJECTORIES, N)).astype(str)
    hits = (rng.uniform(size=N) < 0.3).astype(float)
    partial = rng.uniform(size=N)
    return np.column_stack([hits, hits, partial, partial * 0.9]), labels


def _ratio_row(measure: str, scipy_s: float, ours_s: float, decides: bool) -> dict:
    """A row of scipy's time over ours; a deciding row passes when ours is materially faster."""
    ratio = scipy_s / ours_s
    return {
        "benchmark": "stats",
        "measure": measure,
        "target": f"> {MATERIAL:g}x keeps ours" if decides else "measured",
        "value": f"{ratio:.1f}x ({scipy_s * 1e3:.1f} ms vs {ours_s * 1e3:.1f} ms)",
        "passed": ratio > MATERIAL if decides else None,
    }


def _close(ours: list[float], theirs: list[float], tolerance: float, what: str) -> None:
    """Fail loudly when the two implementations stop giving the same answer."""
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    if worst > tolerance:
        raise AssertionError(f"{what}: ours and scipy differ by {worst} (> {tolerance})")


def _scipy_ci(values: np.ndarray, clusters: np.ndarray | None, resamples: int) -> list[float]:
    """scipy's percentile bootstrap of the mean, of cluster totals when clusters are given."""
    rng = np.random.default_rng(0)
    if clusters is None:
        result = scipy_stats.bootstrap(
            (values,), np.mean, method="percentile", n_resamples=resamples, vectorized=True, rng=rng
        )
    else:
        sums, sizes = stats.cluster_totals(values, clusters)
        result = scipy_stats.bootstrap(
            (sums, sizes),
            lambda s, n, axis=-1: s.sum(axis=axis) / n.sum(axis=axis),
            paired=True,
            method="percentile",
            n_resamples=resamples,
            vectorized=True,
            rng=rng,
        )
    return [float(result.confidence_interval.low), float(result.confidence_interval.high)]


def _ours_cis(matrix: np.ndarray, clusters: np.ndarray | None, resamples: int) -> list[float]:
    """Our bounds of every column from one draw."""
    intervals = stats.bootstrap_cis(matrix, clusters=clusters, resamples=resamples)
    return [bound for interval in intervals for bound in (interval.low, interval.high)]


def _bootstrap_rows(resamples: int, tasks: int, repetitions: int) -> list[dict]:
    """One CI alone (no cached draws), then a report's CIs of ``tasks`` model-task cells."""
    from bench_metrics import _median_times  # bench/ is on sys.path whichever way a benchmark runs

    matrix, labels = _data()

    def ours_one() -> list[float]:
        stats._cached_weights.cache_clear()  # a first call: the draws are made, not reused
        return _ours_cis(matrix[:, :1], None, resamples)

    times, values = _median_times(
        {"ours": ours_one, "scipy": lambda: _scipy_ci(matrix[:, 0], None, resamples)}, repetitions
    )
    _close(values["ours"], values["scipy"], 0.01, "percentile bootstrap")
    rows = [
        _ratio_row(f"percentile bootstrap CI, one metric, first call (n={N})", times["scipy"], times["ours"], False)
    ]

    def ours_report() -> list[float]:
        stats._cached_weights.cache_clear()
        bounds: list[float] = []
        for _ in range(tasks):
            bounds += _ours_cis(matrix, None, resamples) + _ours_cis(matrix, labels, resamples)
        return bounds

    def scipy_report() -> list[float]:
        bounds: list[float] = []
        for _ in range(tasks):
            for clusters in (None, labels):
                for j in range(METRICS):
                    bounds += _scipy_ci(matrix[:, j], clusters, resamples)
        return bounds  # in our order: every column per example, then every column per trajectory

    times, values = _median_times({"ours": ours_report, "scipy": scipy_report}, max(1, repetitions // 2))
    _close(values["ours"], values["scipy"], 0.015, "report bootstraps")
    measure = (
        f"report bootstraps, {tasks} model-task cells x {METRICS} metrics, per example and per trajectory "
        f"(n={N}, {TRAJECTORIES} trajectories): scipy.stats.bootstrap / ours"
    )
    rows.append(_ratio_row(measure, times["scipy"], times["ours"], True))
    return rows


def _sign_flip_row(resamples: int, repetitions: int) -> dict:
    """Monte Carlo paired permutation p-value of rougeL-like differences: ours against permutation_test.

    (0/1 differences need no resampling here: their p-value is the exact binomial one.)
    """
    from bench_metrics import _median_times

    rng = np.random.default_rng(1)
    differences = np.where(rng.uniform(size=N) < 0.4, rng.normal(0.03, 0.2, N), 0.0)

    def scipy_p() -> list[float]:
        result = scipy_stats.permutation_test(
            (differences,),
            lambda d, axis=-1: np.abs(d.sum(axis=axis)),
            permutation_type="samples",
            n_resamples=resamples,
            vectorized=True,
            alternative="greater",
            rng=np.random.default_rng(0),
        )
        return [float(result.pvalue)]

    times, values = _median_times(
        {"ours": lambda: [stats.sign_flip_p_value(differences, resamples=resamples)], "scipy": scipy_p}, repetitions
    )
    # Two Monte Carlo estimates: allow five standard errors of their difference.
    p = values["scipy"][0]
    _close(values["ours"], values["scipy"], 5 * (2 * p * (1 - p) / resamples) ** 0.5, "sign-flip p-value")
    measure = f"sign-flip permutation p, {N} real-valued differences, {resamples:,} resamples: permutation_test / ours"
    return _ratio_row(measure, times["scipy"], times["ours"], True)


def _mcnemar_row(repetitions: int) -> dict:
    """Exact McNemar p-values for every discordant split below the chi-square threshold."""
    from bench_metrics import _median_times

    splits = [(a, n - a) for n in range(1, stats.MCNEMAR_EXACT_BELOW) for a in range(n + 1)]
    pairs = [([1] * a + [0] * b, [0] * a + [1] * b) for a, b in splits]
    times, values = _median_times(
        {
            "ours": lambda: [stats.mcnemar(x, y).p_value for x, y in pairs],
            "scipy": lambda: [float(scipy_stats.binomtest(min(a, b), a + b, 0.5).pvalue) for a, b in splits],
        },
        repetitions,
    )
    _close(values["ours"], values["scipy"], 1e-12, "exact McNemar")
    measure = f"exact McNemar, all {len(splits)} discordant splits below {stats.MCNEMAR_EXACT_BELOW}: binomtest / ours"
    return _ratio_row(measure, times["scipy"], times["ours"], True)


def _import_seconds(module: str, repetitions: int) -> float:
    """Median wall time of a fresh Python process importing ``module``."""
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=REPO)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _import_row(repetitions: int) -> dict:
    """What using scipy.stats at all adds to every report: its import."""
    scipy_s = _import_seconds("scipy.stats", repetitions)
    ours_s = _import_seconds("themisto.reporting.stats", repetitions)
    return {
        "benchmark": "stats",
        "measure": "fresh-process import, scipy.stats / themisto.reporting.stats (numpy included in both)",
        "target": "measured",
        "value": f"{scipy_s / ours_s:.1f}x ({scipy_s:.2f} s vs {ours_s:.2f} s)",
        "passed": None,
    }


def _write_runs(output: Path, models: int, n: int) -> None:
    """A synthetic run in lm-eval's layout: current build's doc columns, exec files for next-cell tasks."""
    from run_all import load

    logs = load(REPO / "tests" / "sample_logs.py")
    tasks = ["themisto_output", "themisto_output_runtime", "themisto_next_cell", "themisto_next_cell_runtime"]
    kinds = ["none", "scalar", "collection", "table", "text", "error", "image"]
    steps = ["first_run", "rerun_unchanged", "rerun_edited", "after_restart"]
    docs = [
        {
            "example_id": f"t{i % TRAJECTORIES}/{i}",
            "trajectory_id": f"t{i % TRAJECTORIES}",
            "prompt": f"prompt {i}",
            "target": f"value {i % 37}\n" * (1 + i % 4),
            "output_kind": kinds[i % len(kinds)],
            "step_kind": steps[i % len(steps)],
            "duplicate_of": f"t{i % TRAJECTORIES}/{i - TRAJECTORIES}" if i % 9 == 0 and i else None,
            "stable": True,
        }
        for i in range(n)
    ]
    rng = random.Random(0)
    for m in range(models):
        samples = {
            task: [
                logs.lm_eval_sample(i, doc, doc["target"] if rng.random() < 0.3 else f"value {rng.randrange(37)}")
                for i, doc in enumerate(docs)
            ]
            for task in tasks
        }
        folder = logs.write_run(output, f"model-{m}", "", samples, split="test")
        for task in tasks[2:]:
            lines = [
                {"example_id": doc["example_id"], "exec_ok": rng.random() < 0.7, "exec_match": 0, "state_match": None}
                for doc in docs
            ]
            logs.write_exec_samples(folder, task, lines)


def _report_row(models: int, repetitions: int) -> dict:
    """Seconds of build_report and render_markdown on a synthetic run (imports done, files cached)."""
    from themisto.reporting.analysis import build_report
    from themisto.reporting.markdown import render_markdown

    with tempfile.TemporaryDirectory() as scratch:
        _write_runs(Path(scratch), models, N)
        times, cpu_times = [], []
        for _ in range(repetitions):
            stats._cached_weights.cache_clear()
            start, cpu_start = time.perf_counter(), time.process_time()
            render_markdown(build_report([Path(scratch)]))
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    # The target is on CPU time: on the shared 2-core machine the wall time
    # mostly measures what else is running.
    cpu = statistics.median(cpu_times)
    return {
        "benchmark": "stats",
        "measure": f"themisto report CPU time, {models} models x 4 tasks x {N} examples, categories and exec "
        f"metrics (build + Markdown, 10,000 resamples, median of {repetitions})",
        "target": f"<= {REPORT_TARGET_S:g} s",
        "value": f"{cpu:.2f} s (wall {statistics.median(times):.2f} s)",
        "passed": cpu <= REPORT_TARGET_S,
    }


def run(quick: bool = False) -> list[dict]:
    """The scipy-or-ours rows, the import cost and a whole report's time."""
    resamples = 2_000 if quick else stats.DEFAULT_RESAMPLES
    repetitions = 3 if quick else 5
    return [
        *_bootstrap_rows(resamples, tasks=2 if quick else 4, repetitions=repetitions),
        _sign_flip_row(resamples, repetitions),
        _mcnemar_row(repetitions),
        _import_row(repetitions),
        _report_row(models=2 if quick else 5, repetitions=repetitions),
    ]


if __name__ == "__main__":
    from run_all import main  # bench/ is on sys.path when a benchmark runs as a script

    sys.exit(main([*sys.argv[1:], Path(__file__).stem]))
