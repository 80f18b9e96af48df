"""``themisto report`` on sample logs written by lm-eval's own EvaluationTracker."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread
from sample_logs import lm_eval_sample, write_exec_samples, write_run

from themisto.cli import main
from themisto.exceptions import OptionError
from themisto.reporting.analysis import build_report
from themisto.reporting.stats import (
    Interval,
    bootstrap_ci,
    disagreement_mde,
    mcnemar,
    minimum_detectable_effect,
    paired_bootstrap_ci,
    sign_flip_p_value,
)

RESAMPLES = 2_000
# The sections of the paired generative metrics.
PAIRED = "Runtime vs plain and placebo, every other metric"
PAIRED_CLUSTERED = "Runtime vs plain and placebo, whole trajectories resampled"
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
            lm_eval_sample(position, doc, _prediction(rng, doc["target"], hit_rates[task]))
            for position, (_, doc) in enumerate(rows)
        ]
    return by_task


def _scores(samples: list[dict], metric: str, order: list[str] | None = None) -> np.ndarray:
    """A metric's values, optionally aligned to a list of example ids."""
    by_id = {s["doc"]["example_id"]: s[metric] for s in samples}
    ids = order if order is not None else [s["doc"]["example_id"] for s in samples]
    return np.array([by_id[i] for i in ids])


def _cells(line: str) -> list[str]:
    """The stripped cells of a Markdown table line."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table(markdown: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the Markdown table whose header starts with ``first_header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and _cells(line)[0] == first_header)
    header = _cells(lines[start])
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, _cells(line))))
    return rows


def _section(markdown: str, title: str) -> str:
    """The text of one ``## title`` section."""
    return markdown.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


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
    write_run(output, "hf", "pretrained=tiny/gpt2,dtype=float32", _model_samples(1, 60, HIT_RATES_MODEL))
    write_run(output, "themisto-empty", "", _model_samples(2, 40, HIT_RATES_BASELINE))
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
        (r["model"], r["task"], r["Δ"], r["metric"]): r for r in _table(_section(report_run["stdout"], PAIRED), "model")
    }
    assert len(rows) == 8 and len(comparisons) == 2 * 2 * len(METRICS)
    for base in ("themisto_output", "themisto_next_cell"):
        without = _logged(run_dir, "tiny__gpt2", base)
        with_runtime = _logged(run_dir, "tiny__gpt2", base + "_runtime")
        order = [s["doc"]["example_id"] for s in without]
        for metric in METRICS:
            a = _scores(without, metric)
            b = _scores(with_runtime, metric, order)
            row = comparisons[("tiny/gpt2", base, "runtime − plain", metric)]
            assert row["n"] == str(len(a))
            assert row["plain / placebo"] == f"{a.mean():.3f}"
            assert row["runtime"] == f"{b.mean():.3f}"
            difference = paired_bootstrap_ci(a, b, resamples=RESAMPLES)
            assert row["Δ [95% CI]"] == _interval_text(difference, signed=True)
            assert row["sign-flip p"] == _p_text(sign_flip_p_value(b - a, resamples=RESAMPLES))
            differences = b - a
            disagreement = float(np.mean(differences != 0))
            assert row["disagree"] == f"{disagreement:.3f}"
            if metric.startswith("exact_match"):
                # A 0/1 metric's MDE comes from the rate at which the two conditions disagree.
                assert row["MDE"] == f"{disagreement_mde(len(a), disagreement):.3f}"
            else:
                assert row["MDE"] == f"{minimum_detectable_effect(differences):.3f}"
            if metric.startswith("exact_match"):
                test = mcnemar(a, b)
                expected = f"{test.only_a}/{test.only_b}, p={_p_text(test.p_value)} ({test.method})"
                assert row["McNemar"] == expected
            else:
                assert row["McNemar"] == "–"
    # The model was given a large runtime gain on output prediction only.
    gain = comparisons[("tiny/gpt2", "themisto_output", "runtime − plain", "exact_match")]
    assert float(gain["sign-flip p"]) < 0.05
    null = comparisons[("tiny/gpt2", "themisto_next_cell", "runtime − plain", "exact_match")]
    assert float(null["sign-flip p"]) > 0.05


def test_a_filter_is_named_only_where_a_task_was_logged_under_several(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = _model_samples(7, 12, HIT_RATES_MODEL)
    rng = random.Random(7)
    strict = {}
    for task in ("themisto_output", "themisto_output_runtime"):
        strict[task] = [
            lm_eval_sample(row["doc_id"], row["doc"], _prediction(rng, row["target"], 0.5), "strict")
            for row in samples[task]
        ]
        samples[task] = samples[task] + strict[task]  # lm-eval logs every filter in one file
    write_run(tmp_path, "hf", "pretrained=m", samples)
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
    comparison = _table(_section(markdown, PAIRED), "model")
    assert {r["task"] for r in comparison} == {
        "themisto_output [answer]",
        "themisto_output [strict]",
        "themisto_next_cell",
    }
    # Stability is a property of the dataset row: one ceiling row per task, whatever the filters.
    ceilings = {r["task"]: r for r in _table(_section(markdown, "Determinism ceiling"), "task")}
    assert set(ceilings) == set(TASKS) and ceilings["themisto_output"]["examples"] == "12"


def test_determinism_ceiling_counts_stable_targets(report_run: dict) -> None:
    rows = {r["task"]: r for r in _table(_section(report_run["stdout"], "Determinism ceiling"), "task")}
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
    write_run(tmp_path, "hf", "pretrained=m", _model_samples(3, 20, HIT_RATES_BASELINE))
    newest = _model_samples(4, 24, HIT_RATES_MODEL, drop_from_runtime=4)
    write_run(tmp_path, "hf", "pretrained=m", newest)
    assert main(["report", str(tmp_path), "--resamples", "200"]) == 0
    markdown = capsys.readouterr().out
    rows = {r["task"]: r for r in _table(markdown, "model")}
    assert rows["themisto_output"]["n"] == "24" and rows["themisto_output_runtime"]["n"] == "20"
    expected = bootstrap_ci(_scores(newest["themisto_output"], "rougeL"), resamples=200)
    assert rows["themisto_output"]["rougeL"] == _interval_text(expected)
    comparison = _table(_section(markdown, PAIRED), "model")
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
    write_run(tmp_path, "hf", "pretrained=m", samples)
    assert "--resamples must be at least 1, got 0" in _error_of([str(tmp_path), "--resamples=0"], capsys)
    assert "--seed must be at least 0, got -1" in _error_of([str(tmp_path), "--seed=-1"], capsys)
    with pytest.raises(OptionError, match=r"^seed must be at least 0, got -1$"):  # a Python caller: the keyword
        build_report([tmp_path], seed=-1)
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
    write_run(tmp_path, "hf", "pretrained=m", samples)
    assert main(["report", str(tmp_path), "--resamples", "100"]) == 0
    markdown = capsys.readouterr().out
    assert len(_table(markdown, "model")) == 4
    assert f"## {PAIRED}" not in markdown
    assert "not paired, samples lack doc.example_id" in markdown


# --- Statistics that match the data: trajectories, categories, duplicates, exec outcomes, splits ---

TRAJECTORY_RATES = [0.05, 0.9, 0.15, 0.8, 0.1, 0.95]  # success rate of each trajectory's examples
PER_TRAJECTORY = 25
OUTPUT_KINDS = ["none", "scalar", "collection", "table", "text", "error", "image", None]
STEP_KINDS = ["first_run", "rerun_unchanged", "rerun_edited", "after_restart"]


def _rich_docs() -> list[dict]:
    """Rows of six trajectories with the category and duplicate columns of a current build."""
    docs: list[dict[str, Any]] = []
    for t, _ in enumerate(TRAJECTORY_RATES):
        for step in range(PER_TRAJECTORY):
            i = len(docs)
            docs.append(
                {
                    "example_id": f"traj{t}/{step}",
                    "trajectory_id": f"traj{t}",
                    "step": step,
                    "prompt": f"prompt {i}",
                    "target": TARGETS[i % len(TARGETS)],
                    "output_kind": OUTPUT_KINDS[i % len(OUTPUT_KINDS)],
                    "step_kind": STEP_KINDS[i % len(STEP_KINDS)],
                    # every fifth step repeats the step before it
                    "duplicate_of": f"traj{t}/{step - 1}" if step % 5 == 4 else None,
                }
            )
    return docs


def _rich_samples(seed: int) -> dict[str, list[dict]]:
    """Samples whose success depends on the trajectory; runtime helps in the first three trajectories."""
    rng = random.Random(seed)
    by_task = {}
    for task in TASKS:
        samples = []
        for position, doc in enumerate(_rich_docs()):
            t = int(doc["trajectory_id"].removeprefix("traj"))
            rate = TRAJECTORY_RATES[t] + (0.1 if task.endswith("_runtime") and t < 3 else 0.0)
            samples.append(lm_eval_sample(position, doc, _prediction(rng, doc["target"], rate)))
        by_task[task] = samples
    return by_task


def _exec_lines(task: str, seed: int) -> list[dict]:
    """exec-score lines: bools and 0/1 mixed, state_match null (excluded) on every seventh example."""
    rng = random.Random(f"{task}:{seed}")
    ok_rate = 0.8 if task.endswith("_runtime") else 0.4
    lines = []
    for i, doc in enumerate(_rich_docs()):
        ok = rng.random() < ok_rate
        lines.append(
            {
                "example_id": doc["example_id"],
                "exec_ok": ok,
                "exec_match": int(ok and rng.random() < 0.5),
                "state_match": None if i % 7 == 0 else rng.random() < 0.3,
                "error": None if ok else "NameError: name 'x' is not defined",
            }
        )
    if not task.endswith("_runtime"):
        lines = lines[3:] + [{"example_id": "elsewhere/1", "exec_ok": 1, "exec_match": 0, "state_match": 0}]
    return lines


def _run_report(args: list[str]) -> str:
    """The Markdown ``themisto report`` prints for these arguments (exit 0)."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", *args, "--resamples", str(RESAMPLES)]) == 0
    return stdout.getvalue()


@pytest.fixture(scope="module")
def rich_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A run with trajectories of very different difficulty, category columns and exec outcomes."""
    output = tmp_path_factory.mktemp("rich")
    samples = _rich_samples(21)
    folder = write_run(output, "hf", "pretrained=org/coder", samples, split="test")
    exec_lines = {task: _exec_lines(task, 21) for task in ("themisto_next_cell", "themisto_next_cell_runtime")}
    for task, lines in exec_lines.items():
        write_exec_samples(folder, task, lines)
    return {"samples": samples, "exec": exec_lines, "markdown": _run_report([str(output)])}


def _parse_interval(cell: str) -> tuple[float, float, float]:
    """``estimate [low, high]`` back to numbers."""
    estimate, rest = cell.split(" [")
    low, high = rest.rstrip("]").split(", ")
    return float(estimate), float(low), float(high)


def _trajectories(samples: list[dict]) -> list[str]:
    """Each sample's trajectory id."""
    return [s["doc"]["trajectory_id"] for s in samples]


def test_clustered_scores_resample_whole_trajectories_and_are_wider(rich_run: dict) -> None:
    markdown = rich_run["markdown"]
    iid = {r["task"]: r for r in _table(_section(markdown, "Scores"), "model")}
    clustered = {r["task"]: r for r in _table(_section(markdown, "Scores, whole trajectories resampled"), "model")}
    assert set(clustered) == set(TASKS)
    for task in TASKS:
        samples = rich_run["samples"][task]
        assert clustered[task]["trajectories"] == "6" and clustered[task]["n"] == "150"
        for metric in METRICS:
            values = _scores(samples, metric)
            assert iid[task][metric] == _interval_text(bootstrap_ci(values, resamples=RESAMPLES))
            expected = bootstrap_ci(values, clusters=_trajectories(samples), resamples=RESAMPLES)
            assert clustered[task][metric] == _interval_text(expected)
        # Six trajectories of very different difficulty: far fewer independent units than examples.
        _, iid_low, iid_high = _parse_interval(iid[task]["exact_match"])
        _, low, high = _parse_interval(clustered[task]["exact_match"])
        assert high - low > 1.5 * (iid_high - iid_low)


def test_clustered_paired_tests_flip_and_resample_whole_trajectories(rich_run: dict) -> None:
    markdown = rich_run["markdown"]
    iid = {(r["task"], r["Δ"], r["metric"]): r for r in _table(_section(markdown, PAIRED), "model")}
    section = _section(markdown, PAIRED_CLUSTERED)
    clustered = {(r["task"], r["Δ"], r["metric"]): r for r in _table(section, "model")}
    assert set(clustered) == set(iid)
    for base in ("themisto_output", "themisto_next_cell"):
        without, with_runtime = rich_run["samples"][base], rich_run["samples"][base + "_runtime"]
        order = [s["doc"]["example_id"] for s in without]
        for metric in METRICS:
            a, b = _scores(without, metric), _scores(with_runtime, metric, order)
            row = clustered[(base, "runtime − plain", metric)]
            assert row["trajectories"] == "6" and row["n"] == "150"
            difference = paired_bootstrap_ci(a, b, clusters=_trajectories(without), resamples=RESAMPLES)
            assert row["Δ [95% CI]"] == _interval_text(difference, signed=True)
            p = sign_flip_p_value(b - a, clusters=_trajectories(without), resamples=RESAMPLES)
            assert row["sign-flip p"] == _p_text(p)
            # Six sign flips can never give a p-value below 2/64.
            assert float(row["sign-flip p"]) >= 2 / 64


def test_every_metric_is_broken_down_by_category(rich_run: dict) -> None:
    markdown = rich_run["markdown"]
    samples = rich_run["samples"]["themisto_output_runtime"]
    for column, values in (("output_kind", OUTPUT_KINDS), ("step_kind", STEP_KINDS)):
        rows = _table(_section(markdown, f"By {column}"), "model")
        mine = {r[column]: r for r in rows if r["task"] == "themisto_output_runtime"}
        labels = ["(missing)" if v is None else v for v in values]
        assert sorted(mine) == sorted(labels)
        assert len(rows) == len(TASKS) * len(labels)
        for value, label in zip(values, labels):
            subset = [s for s in samples if s["doc"][column] == value]
            assert mine[label]["n"] == str(len(subset))
            for metric in METRICS:
                expected = bootstrap_ci(_scores(subset, metric), resamples=RESAMPLES)
                assert mine[label][metric] == _interval_text(expected)


def test_metrics_with_and_without_duplicates(rich_run: dict) -> None:
    rows = _table(_section(rich_run["markdown"], "With and without duplicates"), "model")
    assert len(rows) == 2 * len(TASKS)
    for task in TASKS:
        samples = rich_run["samples"][task]
        originals = [s for s in samples if s["doc"]["duplicate_of"] is None]
        assert len(originals) == 150 - 30
        mine = {r["examples"]: r for r in rows if r["task"] == task}
        assert (mine["all"]["n"], mine["without duplicates"]["n"]) == ("150", "120")
        for label, subset in (("all", samples), ("without duplicates", originals)):
            for metric in METRICS:
                expected = bootstrap_ci(_scores(subset, metric), resamples=RESAMPLES)
                assert mine[label][metric] == _interval_text(expected)


def _exec_values(lines: list[dict], metric: str, ids: list[str]) -> dict[str, float]:
    """An exec metric's non-null values by example id, limited to the samples' ids."""
    return {
        line["example_id"]: float(line[metric])
        for line in lines
        if line["example_id"] in ids and line[metric] is not None
    }


def test_exec_outcomes_are_reported_as_metrics_with_cis_and_paired_tests(rich_run: dict) -> None:
    markdown = rich_run["markdown"]
    scores = {r["task"]: r for r in _table(_section(markdown, "Scores"), "model")}
    clustered = {r["task"]: r for r in _table(_section(markdown, "Scores, whole trajectories resampled"), "model")}
    assert scores["themisto_output"]["exec_ok"] == "–"  # no exec file for output prediction
    for task in ("themisto_next_cell", "themisto_next_cell_runtime"):
        samples = rich_run["samples"][task]
        ids = [s["doc"]["example_id"] for s in samples]
        trajectory = dict(zip(ids, _trajectories(samples)))
        for metric in ("exec_ok", "exec_match", "state_match"):
            values = _exec_values(rich_run["exec"][task], metric, ids)
            ordered = [i for i in ids if i in values]
            data = np.array([values[i] for i in ordered])
            cell = _interval_text(bootstrap_ci(data, resamples=RESAMPLES))
            suffix = "" if len(values) == 150 else f" (n={len(values)})"
            assert scores[task][metric] == cell + suffix
            expected = bootstrap_ci(data, clusters=[trajectory[i] for i in ordered], resamples=RESAMPLES)
            assert clustered[task][metric] == _interval_text(expected) + suffix
    # exec_ok: 3 examples without a line in the no-runtime file; state_match: nulls excluded as well.
    assert scores["themisto_next_cell"]["exec_ok"].endswith("(n=147)")
    pairs = {(r["task"], r["Δ"], r["metric"]): r for r in _table(_section(markdown, PAIRED), "model")}
    ok = pairs[("themisto_next_cell", "runtime − plain", "exec_ok")]
    without = _exec_values(rich_run["exec"]["themisto_next_cell"], "exec_ok", list(trajectory))
    with_runtime = _exec_values(rich_run["exec"]["themisto_next_cell_runtime"], "exec_ok", list(trajectory))
    common = [i for i in (s["doc"]["example_id"] for s in rich_run["samples"]["themisto_next_cell"]) if i in without]
    a = np.array([without[i] for i in common])
    b = np.array([with_runtime[i] for i in common])
    assert ok["n"] == str(len(common)) == "147"
    assert ok["Δ [95% CI]"] == _interval_text(paired_bootstrap_ci(a, b, resamples=RESAMPLES), signed=True)
    test = mcnemar(a, b)
    assert ok["McNemar"] == f"{test.only_a}/{test.only_b}, p={_p_text(test.p_value)} ({test.method})"
    assert float(ok["sign-flip p"]) < 0.05  # exec_ok rate 0.4 vs 0.8
    notes = _section(markdown, "Notes")
    assert "exec_samples_themisto_next_cell.jsonl: no line for 3 of 150 examples" in notes
    assert "exec_samples_themisto_next_cell.jsonl: 1 lines name examples the samples do not have" in notes


@pytest.mark.parametrize(
    "line, message",
    [
        ({"example_id": "nb0/0", "exec_ok": 2, "exec_match": 0, "state_match": 0}, "'exec_ok' is 2"),
        ({"example_id": "nb0/0", "exec_ok": "yes", "exec_match": 0, "state_match": 0}, "'exec_ok' is 'yes'"),
        ({"example_id": "nb0/0", "exec_ok": 1, "exec_match": 0}, "no 'state_match'"),
        ({"exec_ok": 1, "exec_match": 0, "state_match": 0}, "no 'example_id'"),
    ],
)
def test_bad_exec_sample_lines_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: dict, message: str
) -> None:
    folder = write_run(tmp_path, "hf", "pretrained=m", _model_samples(8, 6, HIT_RATES_BASELINE))
    path = write_exec_samples(folder, "themisto_next_cell", [line])
    error = _error_of([str(tmp_path)], capsys)
    assert f"{path}:1:" in error and message in error
    good = {"example_id": "nb0/0", "exec_ok": 1, "exec_match": 0, "state_match": None}
    write_exec_samples(folder, "themisto_next_cell", [good, good])
    assert "appears twice" in _error_of([str(tmp_path)], capsys)


def test_mde_section_lists_each_split_evaluated(tmp_path: Path) -> None:
    write_run(tmp_path / "test", "hf", "pretrained=m", _model_samples(9, 40, HIT_RATES_MODEL), split="test")
    write_run(tmp_path / "full", "hf", "pretrained=m", _model_samples(10, 90, HIT_RATES_MODEL), split="full")
    markdown = _run_report([str(tmp_path)])
    rows = _table(_section(markdown, "Minimum detectable effect"), "task")
    assert [(r["task"], r["split"], r["pairs"]) for r in rows] == [
        ("themisto_next_cell", "full", "90"),
        ("themisto_next_cell", "test", "40"),
        ("themisto_output", "full", "90"),
        ("themisto_output", "test", "40"),
    ]
    for row in rows:
        n = int(row["pairs"])
        for rate in ("5%", "10%", "20%"):
            mde = disagreement_mde(n, int(rate.rstrip("%")) / 100)
            assert row[f"at {rate}"] == ("–" if np.isnan(mde) else f"{mde:.3f}")
    assert rows[0]["at 10%"] == f"{disagreement_mde(90, 0.1):.3f}" != "0.000"


def test_mde_is_never_zero_when_predictions_do_not_change(tmp_path: Path) -> None:
    # A deterministic predictor answers the same with and without runtime: no pair differs.
    samples = _model_samples(11, 100, HIT_RATES_BASELINE)
    for base in ("themisto_output", "themisto_next_cell"):
        samples[base + "_runtime"] = samples[base]
    write_run(tmp_path, "themisto-repeat-last", "", samples)
    markdown = _run_report([str(tmp_path)])
    for row in _table(_section(markdown, PAIRED), "model"):
        assert (row["disagree"], row["MDE"], row["Δ [95% CI]"]) == ("0.000", "–", "+0.000 [0.000, 0.000]")
    for row in _table(_section(markdown, "Minimum detectable effect"), "task"):
        assert row["split"] == "test" and row["at 10%"] == f"{disagreement_mde(100, 0.1):.3f}" == "0.088"


def test_sections_of_missing_columns_are_omitted_with_a_note(report_run: dict, tmp_path: Path) -> None:
    markdown = report_run["stdout"]  # docs without category or duplicate columns (an older build)
    for column in ("output_kind", "step_kind", "duplicate_of"):
        assert f"no `{column}` column" in _section(markdown, "Notes")
    assert "## By " not in markdown and "## With and without duplicates" not in markdown
    samples = _model_samples(12, 12, HIT_RATES_BASELINE)
    for rows in samples.values():
        for row in rows:
            row["doc"].pop("trajectory_id", None)
    write_run(tmp_path, "hf", "pretrained=m", samples)
    markdown = _run_report([str(tmp_path)])
    assert "whole trajectories resampled" not in markdown
    assert "CIs and tests resampling whole trajectories omitted" in _section(markdown, "Notes")


def test_report_opens_with_what_was_run_then_how_to_read_it(report_run: dict) -> None:
    # No likelihood task was run: no bits-per-byte section, the reading guide comes first.
    lines = report_run["stdout"].splitlines()
    assert lines[:2] == ["# Themisto report", ""]
    assert lines[2].startswith("Split `test` · build not logged · 2,000 bootstrap resamples, seed 0")
    assert lines[3:5] == ["", "## How to read this"]
    assert "## Bits per byte" not in report_run["stdout"]
    how_to = _section(report_run["stdout"], "How to read this")
    assert "MDE" in how_to and "design effect" in how_to and "placebo" in how_to


def test_plot_leads_with_the_paired_difference_and_shows_zeros(tmp_path: Path) -> None:
    from themisto.reporting.plot import report_figure

    same = _model_samples(13, 30, HIT_RATES_BASELINE)
    for base in ("themisto_output", "themisto_next_cell"):
        same[base + "_runtime"] = same[base]  # every difference exactly 0
    write_run(tmp_path, "same", "", same)
    write_run(tmp_path, "hf", "pretrained=gain", _model_samples(14, 30, HIT_RATES_MODEL))
    report = build_report([tmp_path], resamples=200)
    figure = report_figure(report)
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.get_title()]  # not the legend's cell
    assert [ax.get_title() for ax in panels] == [
        "Δ exact_match_norm: runtime − plain, runtime − placebo",
        "exact_match (strict)",
        "exact_match_norm",
        "rougeL",
        "chrf",
    ]
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in panels)
    legends = [*figure.legends, *(ax.get_legend() for ax in figure.axes if ax.get_legend() is not None)]
    assert len(legends) == 1 and all(ax.get_legend() is None for ax in panels)
    labels = [text.get_text() for text in legends[0].get_texts()]
    assert sorted(labels) == ["determinism ceiling", "gain", "same"]  # the docs' `stable` gives a ceiling
    models = [label for label in labels if label in ("gain", "same")]
    # The zero differences of "same" are drawn: a marker at 0 for each task pair, not clipped.
    markers = dict(zip(models, (line for line in panels[0].get_lines() if line.get_marker() == "D")))
    assert list(markers["same"].get_ydata()) == [0.0, 0.0] and not markers["same"].get_clip_on()  # type: ignore[arg-type]
    gains = {c.task: c for c in report.comparisons if c.model == "gain" and c.metric == "exact_match_norm"}
    expected = [gains[task].clustered_difference.estimate for task in ("themisto_output", "themisto_next_cell")]
    assert list(markers["gain"].get_ydata()) == pytest.approx(expected) and max(expected) > 0  # type: ignore[arg-type]


def test_an_outcome_excluded_everywhere_gets_no_column_or_panel(tmp_path: Path) -> None:
    from themisto.reporting.plot import report_figure

    samples = _model_samples(15, 20, HIT_RATES_MODEL)
    folder = write_run(tmp_path, "hf", "pretrained=m", samples)
    for task in ("themisto_next_cell", "themisto_next_cell_runtime"):
        lines = [
            {"example_id": s["doc"]["example_id"], "exec_ok": i % 2, "exec_match": 0, "state_match": None}
            for i, s in enumerate(samples[task])
        ]
        write_exec_samples(folder, task, lines)
    header = _table(_section(_run_report([str(tmp_path)]), "Scores"), "model")[0]
    assert list(header)[3:] == [*METRICS, "exec_ok", "exec_match"]
    figure = report_figure(build_report([tmp_path], resamples=100))
    panels = {ax.get_title(): ax for ax in figure.axes if ax.get_visible()}
    assert "state_match" not in panels
    shown = [label.get_text() for label in panels["exec_ok"].get_xticklabels()]
    assert shown == ["next cell\nplain", "next cell\nruntime"]


def test_same_seed_same_report_and_another_seed_another(tmp_path: Path) -> None:
    write_run(tmp_path, "hf", "pretrained=org/coder", _rich_samples(21), split="test")
    first = _run_report([str(tmp_path)])
    assert _run_report([str(tmp_path)]) == first  # the second run reuses the cached bootstrap draws
    other = io.StringIO()
    with contextlib.redirect_stdout(other):
        assert main(["report", str(tmp_path), "--resamples", str(RESAMPLES), "--seed", "1"]) == 0
    assert other.getvalue() != first
    # Only resampled figures move: the means stay.
    for row, moved in zip(_table(first, "model"), _table(other.getvalue(), "model")):
        assert [_parse_interval(row[m])[0] for m in METRICS] == [_parse_interval(moved[m])[0] for m in METRICS]
