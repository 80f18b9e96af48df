"""Models compared: real lm-eval runs of two models on the likelihood tasks, paired model − model in the report."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from sample_logs import lm_eval_sample, write_run
from test_report import _interval_text, _p_text, _parse_interval, _section, _table
from test_report_likelihood import _docs, _likelihood_run

from themisto.cli import main
from themisto.evaluation import evaluate
from themisto.integrations import model_differences
from themisto.reporting.stats import paired_bootstrap_ci, sign_flip_p_value

pytestmark = pytest.mark.slow  # lm-eval runs of the compression control and the tiny GPT-2

RESAMPLES = 2_000
SECTION = "Models compared"
ARMS = [
    f"{family}{arm}_bpb" for family in ("themisto_output", "themisto_next_cell") for arm in ("", "_runtime", "_placebo")
]
COMPRESSION = "themisto-compression"


def _eval(runs: Path, build: Path, model: str, *args: str) -> None:
    """``themisto eval`` of the likelihood group into ``runs`` (exit 0)."""
    command = ["eval", "--model", model, *args, "--tasks", "themisto_bpb", "-o", str(runs), "--data", str(build)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(command) == 0


def _report(*runs: Path) -> str:
    """``themisto report`` of the run folders (exit 0)."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", *map(str, runs), "--resamples", str(RESAMPLES)]) == 0
    return stdout.getvalue()


def _bpb_by_id(folder: Path, task: str) -> dict[str, tuple[float, str]]:
    """Per example id, bits per byte from the logged [loglikelihood, bytes] and the trajectory; empty targets left out."""
    (path,) = folder.glob(f"samples_{task}_2*.jsonl")
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        loglikelihood, size = sample["bits_per_byte"]
        if size:
            found[sample["doc"]["example_id"]] = (-loglikelihood / size / math.log(2), sample["doc"]["trajectory_id"])
    return found


def _rows(markdown: str) -> dict[tuple[str, str, str, str], dict[str, str]]:
    """The model comparison rows by (task, metric, model A, model B)."""
    return {
        (r["task"], r["metric"], r["model A"], r["model B"]): r for r in _table(_section(markdown, SECTION), "task")
    }


@pytest.fixture(scope="module")
def two_models(data_dir: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The compression control and the tiny random GPT-2 scored on the six likelihood arms of the fixture build."""
    runs = tmp_path_factory.mktemp("runs")
    results = {
        key: evaluate(model, model_args, tasks=["themisto_bpb"], data=str(data_dir), output_path=runs, name=name)
        for key, name, model, model_args in (
            (COMPRESSION, None, COMPRESSION, None),
            # named so that it sorts before "themisto-compression": model A of every comparison
            ("gpt2", "gpt2-tiny", "hf", {"pretrained": str(tiny_model), "dtype": "float32"}),
        )
    }
    (gpt2,) = [folder for folder in runs.iterdir() if folder.name != COMPRESSION]
    return {"runs": runs, "gpt2": gpt2, "markdown": _report(runs), "results": results}


def test_the_report_pairs_two_real_models_per_arm_as_the_sample_logs_say(two_models: dict) -> None:
    rows = _rows(two_models["markdown"])
    gpt2_name = next(r["model A"] for r in rows.values() if r["model A"] != COMPRESSION)
    runs = two_models["runs"]
    assert {key[0] for key in rows} == set(ARMS)
    for task in ARMS:
        # Models are sorted: "gpt2-tiny" before "themisto-compression".
        row = rows[(task, "bits_per_byte", gpt2_name, COMPRESSION)]
        a_by_id, b_by_id = _bpb_by_id(two_models["gpt2"], task), _bpb_by_id(runs / COMPRESSION, task)
        ids = [i for i in a_by_id if i in b_by_id]
        a = np.array([a_by_id[i][0] for i in ids])
        b = np.array([b_by_id[i][0] for i in ids])
        clusters = [a_by_id[i][1] for i in ids]
        assert row["n"] == str(len(ids)) and row["trajectories"] == str(len(set(clusters)))
        assert (row["A"], row["B"]) == (f"{a.mean():.3f}", f"{b.mean():.3f}")
        assert row["B − A [95% CI], examples"] == _interval_text(
            paired_bootstrap_ci(a, b, resamples=RESAMPLES), signed=True
        )
        clustered = paired_bootstrap_ci(a, b, clusters=clusters, resamples=RESAMPLES)
        assert row["B − A [95% CI], trajectories"] == _interval_text(clustered, signed=True)
        assert row["p"] == _p_text(sign_flip_p_value(b - a, clusters=clusters, resamples=RESAMPLES))
        # Three trajectories: the trajectory p cannot fall below 2/2^3, so no interval decides.
        assert float(row["p"]) >= 0.25 and row["the benchmark"] == "does not separate them at this n"


def test_the_same_model_twice_is_not_separated(data_dir: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for runs in (first, second):
        _eval(runs, data_dir, COMPRESSION)
    rows = _rows(_report(first, second))
    assert {key[0] for key in rows} == set(ARMS)
    for task in ARMS:
        row = rows[
            (task, "bits_per_byte", f"{COMPRESSION} ({first / COMPRESSION})", f"{COMPRESSION} ({second / COMPRESSION})")
        ]
        assert row["B − A [95% CI], trajectories"] == "+0.000 [0.000, 0.000]"
        assert (row["p"], row["MDE"], row["the benchmark"]) == ("1.000", "–", "does not separate them at this n")


def test_one_model_alone_has_no_comparison(data_dir: Path, tmp_path: Path) -> None:
    _eval(tmp_path, data_dir, COMPRESSION)
    assert f"## {SECTION}" not in _report(tmp_path)


def test_model_differences_give_the_reports_figures_under_stable_keys(two_models: dict) -> None:
    rows = _rows(two_models["markdown"])
    gpt2_name = next(r["model A"] for r in rows.values() if r["model A"] != COMPRESSION)
    results = two_models["results"]
    flat = model_differences(results["gpt2"], results[COMPRESSION], "compression", resamples=RESAMPLES)
    figures = ("", "/low", "/high", "/p", "/n", "/ranks")
    assert set(flat) == {f"themisto/vs/compression/{task}/bits_per_byte{f}" for task in ARMS for f in figures}
    for task in ARMS:
        row = rows[(task, "bits_per_byte", gpt2_name, COMPRESSION)]
        key = f"themisto/vs/compression/{task}/bits_per_byte"
        # The report's B − A is compression − GPT-2; the flat figures are this (GPT-2) − the reference.
        estimate, low, high = _parse_interval(row["B − A [95% CI], trajectories"])
        assert (flat[key], flat[f"{key}/low"], flat[f"{key}/high"]) == pytest.approx((-estimate, -high, -low), abs=6e-4)
        assert _p_text(flat[f"{key}/p"]) == row["p"] and flat[f"{key}/n"] == float(row["n"])
        ranks = {"does not separate them at this n": 0.0, f"ranks {COMPRESSION} above {gpt2_name}": 1.0}
        assert flat[f"{key}/ranks"] == ranks.get(row["the benchmark"], -1.0)
    # The same run against itself: every difference 0, nothing separated.
    same = model_differences(results[COMPRESSION], results[COMPRESSION], resamples=RESAMPLES)
    assert {
        same[f"themisto/vs/reference/{t}/bits_per_byte{f}"] for t in ARMS for f in ("", "/low", "/high", "/ranks")
    } == {0.0}


def test_a_model_worse_on_every_trajectory_is_ranked_and_a_small_gap_is_not(tmp_path: Path) -> None:
    base = _likelihood_run(1, gain=0.25)
    # Twelve trajectories; "org/worse" gives every target of every arm 5% less likelihood per byte,
    # "org/near" one example of one arm a hair more.
    worse = json.loads(json.dumps(base))
    near = json.loads(json.dumps(base))
    for rows in worse.values():
        for row in rows:
            row["bits_per_byte"][0] *= 1.05
    near["themisto_output_bpb"][0]["bits_per_byte"][0] *= 1.001
    for name, samples in (("org/base", base), ("org/worse", worse), ("org/near", near)):
        write_run(tmp_path, "hf", f"pretrained={name}", samples, split="test")
    rows = _rows(_report(tmp_path))
    for task in ARMS:
        ranked = rows[(task, "bits_per_byte", "org/base", "org/worse")]
        estimate, low, _ = _parse_interval(ranked["B − A [95% CI], trajectories"])
        assert estimate > 0 and low > 0 and float(ranked["p"]) < 0.05
        assert ranked["the benchmark"] == "ranks org/base above org/worse"  # lower bits per byte: better
        # "org/near" sorts before "org/worse": B − A is worse − near > 0, so near is the one ranked above.
        assert (
            rows[(task, "bits_per_byte", "org/near", "org/worse")]["the benchmark"] == "ranks org/near above org/worse"
        )
        close = rows[(task, "bits_per_byte", "org/base", "org/near")]
        assert close["the benchmark"] == "does not separate them at this n"


def test_generative_metrics_are_compared_on_the_examples_both_scored(tmp_path: Path) -> None:
    docs = _docs()
    # "org/right" answers every example right, "org/half" every second; "org/half" logged its rows reversed
    # and scored one example fewer, so only example ids pair them.
    right = [lm_eval_sample(i, doc, doc["target"]) for i, doc in enumerate(docs)]
    half = [lm_eval_sample(i, doc, doc["target"] if i % 2 else "no") for i, doc in enumerate(docs)][:-1][::-1]
    write_run(tmp_path, "hf", "pretrained=org/right", {"themisto_output": right}, split="test")
    write_run(tmp_path, "hf", "pretrained=org/half", {"themisto_output": half}, split="test")
    markdown = _report(tmp_path)
    assert "Generative metrics (higher is better):" in _section(
        markdown, SECTION
    ) and "Bits per byte (" not in _section(markdown, SECTION)
    rows = _rows(markdown)
    assert {key[1] for key in rows} == {"exact_match_norm", "chrf"}
    row = rows[("themisto_output", "exact_match_norm", "org/half", "org/right")]
    by_id = {s["doc"]["example_id"]: s["exact_match_norm"] for s in right}
    a = np.array([s["exact_match_norm"] for s in half])
    b = np.array([by_id[s["doc"]["example_id"]] for s in half])
    clusters = [s["doc"]["trajectory_id"] for s in half]
    assert row["n"] == str(len(docs) - 1)
    assert row["B − A [95% CI], examples"] == _interval_text(
        paired_bootstrap_ci(a, b, resamples=RESAMPLES), signed=True
    )
    clustered = paired_bootstrap_ci(a, b, clusters=clusters, resamples=RESAMPLES)
    assert row["B − A [95% CI], trajectories"] == _interval_text(clustered, signed=True)
    # Higher is better here: the model ranked below is the worse one.
    assert row["the benchmark"] == "ranks org/right above org/half"  # a higher chrF: better
    assert "themisto_output: org/half vs org/right: only 119 examples appear in both" in _section(markdown, "Notes")


def _size(folder: Path) -> int:
    """The bytes of every file beneath ``folder``."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_the_compact_copy_gives_the_same_report_at_a_fraction_of_the_size(two_models: dict, tmp_path: Path) -> None:
    runs = two_models["runs"]
    copy = tmp_path / "compact"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["compact", str(runs), "-o", str(copy)]) == 0
    # the same per-example scores, doc columns and model names: the report is the same text but for the folder
    assert _report(copy).replace(str(copy), str(runs)) == two_models["markdown"]
    assert _size(copy) * 5 < _size(runs)
    (line,) = [
        json.loads(text)
        for path in copy.rglob("samples_themisto_output_runtime_bpb_*.jsonl")
        for text in path.read_text(encoding="utf-8").splitlines()[:1]
        if COMPRESSION in str(path)
    ]
    assert "arguments" not in line and "resps" not in line and "history" not in line["doc"]
    assert {"example_id", "trajectory_id", "bits_per_byte", "prompt_hash"} <= set(line) | set(line["doc"])


def test_compact_refuses_an_output_inside_its_run_folder(two_models: dict, capsys: pytest.CaptureFixture[str]) -> None:
    runs = two_models["runs"]
    assert main(["compact", str(runs), "-o", str(runs / "copy")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "must not lie inside the run folder" in line
    assert not (runs / "copy").exists()
