"""``themisto report`` on sample logs written by lm-eval's own EvaluationTracker."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
from lm_eval.loggers import EvaluationTracker
from lm_eval.utils import hash_string
from matplotlib.image import imread

from themisto.cli import main
from themisto.evaluation.metrics import score_sample
from themisto.reporting.stats import (
    Interval,
    bootstrap_ci,
    mcnemar,
    minimum_detectable_effect,
    paired_bootstrap_ci,
    sign_flip_p_value,
)

RESAMPLES = 2_000
TASKS = ["themisto_output", "themisto_output_runtime", "themisto_next_cell", "themisto_next_cell_runtime"]
METRICS = ["exact_match", "exact_match_norm", "rougeL", "chrf"]
TARGETS = [
    "42",
    "   A  B\n0  1  2",
    "<Foo object at 0x7f00aa>",
    "print(df.shape)",
    "array([1, 2, 3])",
    "KeyError: 'x'",
    "df.describe()",
    "(891, 12)",
    "True",
    "",
]


def _docs(n: int) -> list[dict]:
    """Dataset rows as the builder writes them (only the fields the report reads matter)."""
    return [
        {
            "example_id": f"nb{i % 3}/{i}",
            "trajectory_id": f"nb{i % 3}",
            "step": i,
            "prompt": f"prompt {i}",
            "target": TARGETS[i % len(TARGETS)],
            "stable": [True, True, False, None][i % 4],
        }
        for i in range(n)
    ]


def _prediction(rng: random.Random, target: str, hit_rate: float) -> str:
    """The target, a variant that only normalised exact match accepts, or a near miss."""
    roll = rng.random()
    if roll < hit_rate:
        return target
    if roll < hit_rate + 0.15:
        return target + "  \n"
    return target[: len(target) // 2] + " something"


def _lm_eval_sample(doc_id: int, doc: dict, prediction: str, filter_name: str = "answer") -> dict:
    """One logged sample with the keys lm-eval's evaluator gives it (Themisto's filter: answer)."""
    metrics = score_sample(prediction, doc["target"])
    sample = {
        "doc_id": doc_id,
        "doc": doc,
        "target": doc["target"],
        "arguments": [(doc["prompt"], {"until": ["\n\n"]})],
        "resps": [[prediction]],
        "filtered_resps": [prediction],
        "filter": filter_name,
        "metrics": list(metrics),
        "doc_hash": hash_string(json.dumps(doc)),
        "prompt_hash": hash_string(doc["prompt"]),
        "target_hash": hash_string(doc["target"]),
    }
    sample.update(metrics)
    return sample


def _write_run(output: Path, model: str, model_args: str, samples_by_task: dict[str, list[dict]]) -> None:
    """Save results and samples exactly as ``lm_eval --log_samples --output_path`` does."""
    tracker = EvaluationTracker(output_path=str(output))
    tracker.general_config_tracker.log_experiment_args(
        model_source=model,
        model_args=model_args,
        system_instruction=None,
        chat_template=None,
        fewshot_as_multiturn=False,
    )
    results = {
        "results": {task: {"alias": task} for task in samples_by_task},
        "configs": {task: {"task": task} for task in samples_by_task},
        "config": {"model": model, "model_args": model_args},
    }
    tracker.save_results_aggregated(results=results, samples=samples_by_task)
    for task, samples in samples_by_task.items():
        tracker.save_results_samples(task_name=task, samples=samples)


def _model_samples(seed: int, n: int, hit_rates: dict[str, float], drop_from_runtime: int = 0) -> dict[str, list[dict]]:
    """Scored samples of one model on the four tasks; runtime rows come in another order."""
    rng = random.Random(seed)
    docs = _docs(n)
    by_task = {}
    for task in TASKS:
        rows = list(enumerate(docs))
        if task.endswith("_runtime"):
            rng.shuffle(rows)  # pairing must follow example ids, not positions or doc ids
            rows = rows[drop_from_runtime:]
        by_task[task] = [
            _lm_eval_sample(position, doc, _prediction(rng, doc["target"], hit_rates[task]))
            for position, (_, doc) in enumerate(rows)
        ]
    return by_task


def _scores(samples: list[dict], metric: str, order: list[str] | None = None) -> np.ndarray:
    """A metric's values, optionally aligned to a list of example ids."""
    by_id = {s["doc"]["example_id"]: s[metric] for s in samples}
    ids = order if order is not None else [s["doc"]["example_id"] for s in samples]
    return np.array([by_id[i] for i in ids])


def _table(markdown: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the Markdown table whose header starts with ``first_header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))))
    return rows


def _interval_text(interval: Interval, signed: bool = False) -> str:
    """The report's ``estimate [low, high]`` cell, written out independently."""
    sign = "+" if signed else ""
    return f"{interval.estimate:{sign}.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def _p_text(p: float) -> str:
    """The report's p-value cell, written out independently."""
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


HIT_RATES_MODEL = {
    "themisto_output": 0.3,
    "themisto_output_runtime": 0.6,
    "themisto_next_cell": 0.2,
    "themisto_next_cell_runtime": 0.2,
}
HIT_RATES_BASELINE = {task: 0.1 for task in TASKS}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder holding a named model's run and an unnamed baseline's run."""
    output = tmp_path_factory.mktemp("run")
    _write_run(output, "hf", "pretrained=tiny/gpt2,dtype=float32", _model_samples(1, 60, HIT_RATES_MODEL))
    _write_run(output, "themisto-empty", "", _model_samples(2, 40, HIT_RATES_BASELINE))
    return output


@pytest.fixture(scope="module")
def report_run(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The report's stdout and files, computed once for the checks below."""
    out = tmp_path_factory.mktemp("out")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(
            [
                "report",
                str(run_dir),
                "-o",
                str(out / "r" / "report.md"),
                "--plot",
                str(out / "report.png"),
                "--resamples",
                str(RESAMPLES),
            ]
        )
    return {"code": code, "stdout": stdout.getvalue(), "out": out}


def _logged(run_dir: Path, model_folder: str, task: str) -> list[dict]:
    """The sample records lm-eval's tracker wrote for one model and task."""
    (path,) = (run_dir / model_folder).glob(f"samples_{task}_2*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lm_eval_layout_is_what_the_report_expects(run_dir: Path) -> None:
    assert sorted(p.name for p in (run_dir / "tiny__gpt2").iterdir())[0].startswith("results_")
    assert len(list((run_dir / "tiny__gpt2").glob("samples_themisto_output_2*.jsonl"))) == 1


def test_scores_table_matches_direct_computation(run_dir: Path, report_run: dict) -> None:
    assert report_run["code"] == 0
    rows = _table(report_run["stdout"], "model")
    by_key = {(row["model"], row["task"]): row for row in rows}
    assert set(by_key) == {(m, t) for m in ("tiny/gpt2", "themisto-empty") for t in TASKS}
    (baseline_folder,) = [p.name for p in run_dir.iterdir() if p.name != "tiny__gpt2"]
    for model, folder in (("tiny/gpt2", "tiny__gpt2"), ("themisto-empty", baseline_folder)):
        for task in TASKS:
            samples = _logged(run_dir, folder, task)
            row = by_key[(model, task)]
            assert row["n"] == str(len(samples))
            for metric in METRICS:
                expected = bootstrap_ci(_scores(samples, metric), resamples=RESAMPLES)
                assert row[metric] == _interval_text(expected)


def test_runtime_comparison_matches_direct_computation(run_dir: Path, report_run: dict) -> None:
    rows = _table(report_run["stdout"], "model")
    comparisons = {
        (r["model"], r["tasks"], r["metric"]): r
        for r in _table(report_run["stdout"].split("## Runtime vs no runtime")[1], "model")
    }
    assert len(rows) == 8 and len(comparisons) == 2 * 2 * len(METRICS)
    for base in ("themisto_output", "themisto_next_cell"):
        without = _logged(run_dir, "tiny__gpt2", base)
        with_runtime = _logged(run_dir, "tiny__gpt2", base + "_runtime")
        order = [s["doc"]["example_id"] for s in without]
        for metric in METRICS:
            a = _scores(without, metric)
            b = _scores(with_runtime, metric, order)
            row = comparisons[("tiny/gpt2", f"{base} vs {base}_runtime", metric)]
            assert row["n"] == str(len(a))
            assert row["no runtime"] == f"{a.mean():.3f}"
            assert row["runtime"] == f"{b.mean():.3f}"
            difference = paired_bootstrap_ci(a, b, resamples=RESAMPLES)
            assert row["Δ [95% CI]"] == _interval_text(difference, signed=True)
            assert row["sign-flip p"] == _p_text(sign_flip_p_value(b - a, resamples=RESAMPLES))
            assert row["MDE"] == f"{minimum_detectable_effect(b - a):.3f}"
            if metric.startswith("exact_match"):
                test = mcnemar(a, b)
                expected = f"{test.only_a}/{test.only_b}, p={_p_text(test.p_value)} ({test.method})"
                assert row["McNemar"] == expected
            else:
                assert row["McNemar"] == "–"
    # The model was given a large runtime gain on output prediction only.
    gain = comparisons[("tiny/gpt2", "themisto_output vs themisto_output_runtime", "exact_match")]
    assert float(gain["sign-flip p"]) < 0.05
    null = comparisons[("tiny/gpt2", "themisto_next_cell vs themisto_next_cell_runtime", "exact_match")]
    assert float(null["sign-flip p"]) > 0.05


def test_a_filter_is_named_only_where_a_task_was_logged_under_several(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = _model_samples(7, 12, HIT_RATES_MODEL)
    rng = random.Random(7)
    strict = {}
    for task in ("themisto_output", "themisto_output_runtime"):
        strict[task] = [
            _lm_eval_sample(row["doc_id"], row["doc"], _prediction(rng, row["target"], 0.5), "strict")
            for row in samples[task]
        ]
        samples[task] = samples[task] + strict[task]  # lm-eval logs every filter in one file
    _write_run(tmp_path, "hf", "pretrained=m", samples)
    assert main(["report", str(tmp_path), "--resamples", "100"]) == 0
    markdown = capsys.readouterr().out
    rows = {r["task"]: r for r in _table(markdown, "model")}
    assert set(rows) == {
        "themisto_output [answer]", "themisto_output [strict]",
        "themisto_output_runtime [answer]", "themisto_output_runtime [strict]",
        "themisto_next_cell", "themisto_next_cell_runtime",
    }  # fmt: skip
    expected = bootstrap_ci(_scores(strict["themisto_output"], "rougeL"), resamples=100)
    assert rows["themisto_output [strict]"]["n"] == "12"
    assert rows["themisto_output [strict]"]["rougeL"] == _interval_text(expected)
    comparison = _table(markdown.split("## Runtime vs no runtime")[1], "model")
    assert {r["tasks"] for r in comparison} == {
        "themisto_output [answer] vs themisto_output_runtime [answer]",
        "themisto_output [strict] vs themisto_output_runtime [strict]",
        "themisto_next_cell vs themisto_next_cell_runtime",
    }
    # Stability is a property of the dataset row: one ceiling row per task, whatever the filters.
    ceilings = {r["task"]: r for r in _table(markdown, "task")}
    assert set(ceilings) == set(TASKS) and ceilings["themisto_output"]["examples"] == "12"


def test_determinism_ceiling_counts_stable_targets(report_run: dict) -> None:
    rows = {r["task"]: r for r in _table(report_run["stdout"], "task")}
    # 60 examples (the larger run covers the baseline's 40): stable cycles True, True, False, None.
    assert rows["themisto_output"] == {
        "task": "themisto_output",
        "examples": "60",
        "stable": "30",
        "unstable": "15",
        "unknown": "15",
        "ceiling": "0.500",
    }


def test_report_file_and_plot_are_written(report_run: dict) -> None:
    out: Path = report_run["out"]
    assert (out / "r" / "report.md").read_text(encoding="utf-8") == report_run["stdout"]
    image = imread(out / "report.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 400
    assert image[..., :3].std() > 0  # not a blank canvas


def test_newest_run_wins_and_unpaired_examples_are_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_run(tmp_path, "hf", "pretrained=m", _model_samples(3, 20, HIT_RATES_BASELINE))
    newest = _model_samples(4, 24, HIT_RATES_MODEL, drop_from_runtime=4)
    _write_run(tmp_path, "hf", "pretrained=m", newest)
    assert main(["report", str(tmp_path), "--resamples", "200"]) == 0
    markdown = capsys.readouterr().out
    rows = {r["task"]: r for r in _table(markdown, "model")}
    assert rows["themisto_output"]["n"] == "24" and rows["themisto_output_runtime"]["n"] == "20"
    expected = bootstrap_ci(_scores(newest["themisto_output"], "rougeL"), resamples=200)
    assert rows["themisto_output"]["rougeL"] == _interval_text(expected)
    comparison = _table(markdown.split("## Runtime vs no runtime")[1], "model")
    assert {r["n"] for r in comparison} == {"20"}
    assert "older run ignored" in markdown
    assert "only 20 examples appear in both" in markdown


def _error_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The stderr of a report that must fail with exit code 2."""
    assert main(["report", *args]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    return error


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no lm-eval sample files" in _error_of([str(tmp_path)], capsys)
    assert "not found" in _error_of([str(tmp_path / "missing")], capsys)

    samples = _model_samples(5, 6, HIT_RATES_BASELINE)
    _write_run(tmp_path, "hf", "pretrained=m", samples)
    assert "--resamples must be at least 1" in _error_of([str(tmp_path), "--resamples=0"], capsys)
    assert "--seed must be 0 or more" in _error_of([str(tmp_path), "--seed=-1"], capsys)
    (path,) = tmp_path.glob("m/samples_themisto_output_2*.jsonl")
    good = path.read_text()
    path.write_text(good + "{not json\n")
    assert f"{path}:7: not valid JSON" in _error_of([str(tmp_path)], capsys)

    for bad_value in ("high", float("nan"), None):
        broken = json.loads(good.splitlines()[0]) | {"chrf": bad_value}
        path.write_text(json.dumps(broken) + "\n")
        assert "metric 'chrf'" in _error_of([str(tmp_path)], capsys)

    duplicate = good.splitlines()[0]
    path.write_text(good + duplicate + "\n")
    assert "duplicate doc.example_id" in _error_of([str(tmp_path)], capsys)

    empty_log = tmp_path / "empty" / "m" / "samples_themisto_output_2026-01-01T00-00-00.000.jsonl"
    empty_log.parent.mkdir(parents=True)
    empty_log.touch()
    empty_run = [str(empty_log.parents[1]), "--plot", str(tmp_path / "p.png")]
    assert "hold no scored samples" in _error_of(empty_run, capsys)


def test_overlapping_run_folders_count_each_log_once(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir), str(run_dir / "tiny__gpt2"), "--resamples", "100"]) == 0
    rows = _table(capsys.readouterr().out, "model")
    assert len(rows) == len({(r["model"], r["task"]) for r in rows}) == 8


def test_samples_without_example_ids_are_reported_but_not_paired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = _model_samples(6, 10, HIT_RATES_BASELINE)
    for rows in samples.values():
        for row in rows:
            row["doc"].pop("example_id", None)  # the four tasks share the doc dicts
    _write_run(tmp_path, "hf", "pretrained=m", samples)
    assert main(["report", str(tmp_path), "--resamples", "100"]) == 0
    markdown = capsys.readouterr().out
    assert len(_table(markdown, "model")) == 4
    assert "## Runtime vs no runtime" not in markdown
    assert "not paired, samples lack doc.example_id" in markdown
