"""The report's lead, the paired bits per byte of the likelihood tasks, and the plot's paired panels."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sample_logs import lm_eval_likelihood_sample, lm_eval_sample, write_run
from test_report import _cells, _interval_text, _p_text, _parse_interval, _section, _table

from themisto.cli import main
from themisto.reporting.stats import (
    bootstrap_ci,
    design_effect,
    minimum_detectable_effect,
    paired_bootstrap_ci,
    sign_flip_p_value,
)

RESAMPLES = 2_000
FAMILIES = ("themisto_output", "themisto_next_cell")
ARMS = ("", "_runtime", "_placebo")
LEAD = "Bits per byte: runtime vs plain and placebo"
STRATA = "Bits per byte where only the runtime block holds the answer"
BUILD = "/data/builds/themisto-2026"
TRAJECTORIES = 12
PER_TRAJECTORY = 10


def _docs() -> list[dict]:
    """Rows of twelve trajectories; a quarter of the targets hold a token only the runtime block has."""
    docs: list[dict[str, Any]] = []
    for t in range(TRAJECTORIES):
        for step in range(PER_TRAJECTORY):
            i = len(docs)
            docs.append(
                {
                    "example_id": f"traj{t}/{step}",
                    "trajectory_id": f"traj{t}",
                    "prompt": f"prompt {i}",
                    "target": ["42", "(891, 12)", "array([1, 2, 3])", "df.describe()", "'héllo'"][i % 5],
                    "runtime_only": i % 4 == 0,
                    "stable": i % 10 != 0,
                }
            )
    return docs


def _likelihood_run(seed: int, gain: float, placebo_is_runtime: bool = False) -> dict[str, list[dict]]:
    """Samples of the six bpb tasks: the runtime arm gains ``gain`` nats per byte, three times as much on runtime_only.

    Each arm's rows come in another order and with other doc ids, so only example ids pair them.
    """
    rng = random.Random(seed)
    difficulty = {doc["example_id"]: rng.uniform(0.5, 2.0) for doc in _docs()}
    trajectory_shift = {f"traj{t}": rng.gauss(0, 0.3) for t in range(TRAJECTORIES)}
    by_task: dict[str, list[dict]] = {}
    for family in FAMILIES:
        for arm in ARMS:
            task = f"{family}{arm}_bpb"
            if arm == "_placebo" and placebo_is_runtime:
                by_task[task] = list(reversed(by_task[f"{family}_runtime_bpb"]))
                continue
            rows = []
            for doc in _docs():
                size = len(doc["target"].encode("utf-8"))
                per_byte = difficulty[doc["example_id"]] + trajectory_shift[doc["trajectory_id"]] + rng.gauss(0, 0.2)
                if arm == "_runtime":
                    per_byte -= gain * (3 if doc["runtime_only"] else 1)
                rows.append((doc, -max(per_byte, 0.05) * size))
            rng.shuffle(rows)
            by_task[task] = [
                lm_eval_likelihood_sample(i, doc, ll, rng.random() < 0.3) for i, (doc, ll) in enumerate(rows)
            ]
    return by_task


def _bpb(samples: list[dict], order: list[str] | None = None) -> np.ndarray:
    """Per-example bits per byte from the logged [loglikelihood, bytes], optionally in the order of ``order``."""
    by_id = {
        s["doc"]["example_id"]: -s["bits_per_byte"][0] / s["bits_per_byte"][1] / math.log(2)
        for s in samples
        if s["bits_per_byte"][1]  # an empty target has no bits per byte
    }
    return np.array([by_id[i] for i in (order or [s["doc"]["example_id"] for s in samples])])


def _report(run: Path, *extra: str) -> str:
    """``themisto report`` of a run folder (exit 0)."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(run), "--resamples", str(RESAMPLES), *extra]) == 0
    return stdout.getvalue()


@pytest.fixture(scope="module")
def likelihood_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A model that gains from the runtime block, a control whose placebo equals its runtime arm."""
    output = tmp_path_factory.mktemp("bpb")
    helped = _likelihood_run(1, gain=0.25)
    flat = _likelihood_run(2, gain=0.25, placebo_is_runtime=True)
    write_run(output, "hf", "pretrained=org/helped", helped, split="test", build=BUILD)
    write_run(output, "hf", "pretrained=org/flat", flat, split="test", build=BUILD)
    plot = output.parent / f"{output.name}.png"
    return {"samples": {"org/helped": helped, "org/flat": flat}, "markdown": _report(output, "--plot", str(plot))}


def _lead(markdown: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """The lead table's rows by (model, task, contrast)."""
    return {(r["model"], r["task"], r["Δ"]): r for r in _table(_section(markdown, LEAD), "model")}


def test_the_report_leads_with_the_paired_bits_per_byte(likelihood_run: dict) -> None:
    lines = likelihood_run["markdown"].splitlines()
    assert (
        lines[2]
        == f"Split `test` · build `{BUILD}` · 2,000 bootstrap resamples, seed 0 (the same seed gives the same report)."
    )
    assert lines[4] == f"## {LEAD}"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:3] == [f"## {LEAD}", f"## {STRATA}", "## How to read this"]
    assert "cannot fall below" not in _section(likelihood_run["markdown"], LEAD)  # twelve trajectories


def test_lead_figures_match_a_direct_computation_paired_by_example_id(likelihood_run: dict) -> None:
    rows = _lead(likelihood_run["markdown"])
    assert len(rows) == 2 * 2 * 2  # two models, two tasks, two contrasts
    for model, samples in likelihood_run["samples"].items():
        for family in FAMILIES:
            runtime = samples[f"{family}_runtime_bpb"]
            for arm in ("plain", "placebo"):
                other = samples[f"{family}{'' if arm == 'plain' else '_' + arm}_bpb"]
                # The report keeps the other arm's order (the bootstrap draws rows by position).
                order = [s["doc"]["example_id"] for s in other]
                clusters = [s["doc"]["trajectory_id"] for s in other]
                a, b = _bpb(other), _bpb(runtime, order)
                d = b - a
                row = rows[(model, f"{family}_bpb", f"runtime − {arm}")]
                assert (row["n"], row["trajectories"]) == ("120", "12")
                assert row["plain / placebo"] == f"{a.mean():.3f}" and row["runtime"] == f"{b.mean():.3f}"
                assert row["Δ [95% CI], examples"] == _interval_text(
                    paired_bootstrap_ci(a, b, resamples=RESAMPLES), signed=True
                )
                clustered = paired_bootstrap_ci(a, b, clusters=clusters, resamples=RESAMPLES)
                assert row["Δ [95% CI], trajectories"] == _interval_text(clustered, signed=True)
                if np.any(d != 0):
                    assert row["p"] == _p_text(sign_flip_p_value(d, clusters=clusters, resamples=RESAMPLES))
                    assert row["MDE"] == f"{minimum_detectable_effect(d, clusters=clusters):.3f}"
                    assert row["deff"] == f"{design_effect(d, clusters):.2f}"
                    # Zipping the arms by position instead would pair unrelated examples: a far wider spread
                    # (the MDE and CIs asserted above would not match).
                    zipped = _bpb(runtime) - a
                    assert np.std(zipped) > 1.5 * np.std(d)


def test_a_runtime_gain_shows_as_a_negative_delta_whose_interval_excludes_zero(likelihood_run: dict) -> None:
    rows = _lead(likelihood_run["markdown"])
    for family in FAMILIES:
        for contrast in ("runtime − plain", "runtime − placebo"):
            row = rows[("org/helped", f"{family}_bpb", contrast)]
            estimate, low, high = _parse_interval(row["Δ [95% CI], trajectories"])
            assert estimate < 0 and high < 0 and float(row["p"]) < 0.05
            # The design effect: trajectories share a difficulty shift, so they widen the MDE beyond 2.8·sd/√n.
            assert float(row["deff"]) > 0 and float(row["MDE"]) > 0


def test_a_placebo_equal_to_the_runtime_arm_gives_zero(likelihood_run: dict) -> None:
    rows = _lead(likelihood_run["markdown"])
    for family in FAMILIES:
        same = rows[("org/flat", f"{family}_bpb", "runtime − placebo")]
        assert same["Δ [95% CI], trajectories"] == "+0.000 [0.000, 0.000]"
        assert (same["p"], same["MDE"], same["deff"]) == ("1.000", "–", "–")
        gain = rows[("org/flat", f"{family}_bpb", "runtime − plain")]
        assert _parse_interval(gain["Δ [95% CI], trajectories"])[2] < 0


def test_runtime_only_stratum_has_its_own_rows(likelihood_run: dict) -> None:
    rows = {
        (r["model"], r["task"], r["Δ"], r["examples"]): r
        for r in _table(_section(likelihood_run["markdown"], STRATA), "model")
    }
    samples = likelihood_run["samples"]["org/helped"]
    for family in FAMILIES:
        runtime = samples[f"{family}_runtime_bpb"]
        order = [s["doc"]["example_id"] for s in runtime]
        flags = np.array([s["doc"]["runtime_only"] for s in runtime])
        clusters = np.array([s["doc"]["trajectory_id"] for s in runtime])
        d = _bpb(runtime) - _bpb(samples[f"{family}_bpb"], order)
        estimates = {}
        for stratum, mask in (("runtime_only", flags), ("rest", ~flags)):
            row = rows[("org/helped", f"{family}_bpb", "runtime − plain", stratum)]
            assert row["n"] == str(int(mask.sum())) and row["trajectories"] == str(len(set(clusters[mask])))
            expected = bootstrap_ci(d[mask], clusters=clusters[mask], resamples=RESAMPLES)
            assert row["Δ [95% CI], trajectories"] == _interval_text(expected, signed=True)
            estimates[stratum] = expected.estimate
        # The gain was made three times as large where only the block holds the answer.
        assert estimates["runtime_only"] < 2 * estimates["rest"] < 0


def test_likelihood_scores_have_their_own_table(likelihood_run: dict) -> None:
    scores = _section(likelihood_run["markdown"], "Scores")
    header = _cells(next(line for line in scores.splitlines() if line.startswith("| model")))
    assert header == ["model", "task", "n", "bits_per_byte", "greedy_match"]
    rows = {(r["model"], r["task"]): r for r in _table(scores, "model")}
    samples = likelihood_run["samples"]["org/helped"]["themisto_output_placebo_bpb"]
    expected = bootstrap_ci(_bpb(samples), resamples=RESAMPLES)
    assert rows[("org/helped", "themisto_output_placebo_bpb")]["bits_per_byte"] == _interval_text(expected)


def test_generative_tasks_gain_the_placebo_contrast(tmp_path: Path) -> None:
    rng = random.Random(3)
    docs = _docs()
    samples = {}
    for family in FAMILIES:
        for arm, rate in (("", 0.2), ("_runtime", 0.7), ("_placebo", 0.2)):
            rows = [
                lm_eval_sample(i, doc, doc["target"] if rng.random() < rate else "no") for i, doc in enumerate(docs)
            ]
            rng.shuffle(rows)
            samples[family + arm] = rows
    write_run(tmp_path, "hf", "pretrained=org/gen", samples, split="test")
    markdown = _report(tmp_path)
    assert f"## {LEAD}" not in markdown
    paired = _section(markdown, "Runtime vs plain and placebo, every other metric")
    by_key = {(r["task"], r["Δ"], r["metric"]): r for r in _table(paired, "model")}
    runtime = {s["doc"]["example_id"]: s["exact_match"] for s in samples["themisto_output_runtime"]}
    placebo = samples["themisto_output_placebo"]
    a = np.array([s["exact_match"] for s in placebo])
    b = np.array([runtime[s["doc"]["example_id"]] for s in placebo])
    row = by_key[("themisto_output", "runtime − placebo", "exact_match")]
    assert row["Δ [95% CI]"] == _interval_text(paired_bootstrap_ci(a, b, resamples=RESAMPLES), signed=True)
    assert float(row["sign-flip p"]) < 0.05
    # The generative headline also comes per runtime_only stratum.
    strata = _table(_section(markdown, "`exact_match_norm` where only the runtime block holds the answer"), "model")
    assert {r["examples"] for r in strata} == {"runtime_only", "rest"} and len(strata) == 2 * 2 * 2


def test_an_empty_target_is_left_out_of_bits_per_byte_with_a_note(tmp_path: Path) -> None:
    samples = _likelihood_run(4, gain=0.1)
    for rows in samples.values():
        for row in rows:
            if row["doc"]["example_id"] == "traj0/0":
                row["bits_per_byte"] = [0.0, 0]
    write_run(tmp_path, "hf", "pretrained=org/m", samples)
    markdown = _report(tmp_path)
    assert {r["n"] for r in _lead(markdown).values()} == {"119"}
    assert "themisto_output_bpb: 1 examples with an empty target have no bits per byte" in markdown


@pytest.mark.parametrize("value", [[-1.0], [-1.0, -3], ["a", 3], -1.5, [True, 3]])
def test_a_malformed_bits_per_byte_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object
) -> None:
    folder = write_run(tmp_path, "hf", "pretrained=org/m", _likelihood_run(5, gain=0.1))
    (path,) = folder.glob("samples_themisto_output_bpb_2*.jsonl")
    first, *rest = path.read_text().splitlines()
    path.write_text("\n".join([json.dumps(json.loads(first) | {"bits_per_byte": value}), *rest]) + "\n")
    assert main(["report", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{path}:1: metric 'bits_per_byte'" in error


def test_plot_leads_with_paired_bits_per_byte_marked_with_p(tmp_path: Path) -> None:
    from themisto.reporting.analysis import build_report
    from themisto.reporting.plot import report_figure

    write_run(tmp_path, "hf", "pretrained=org/helped", _likelihood_run(1, gain=0.25), split="test", build=BUILD)
    write_run(tmp_path, "hf", "pretrained=org/flat", _likelihood_run(2, 0.25, placebo_is_runtime=True), split="test")
    rng = random.Random(6)
    for baseline, rate in (("themisto-majority", 0.1), ("themisto-heuristic", 0.3), ("themisto-empty", 0.0)):
        generative = {
            family + arm: [
                lm_eval_sample(i, doc, doc["target"] if rng.random() < rate else "x") for i, doc in enumerate(_docs())
            ]
            for family in FAMILIES
            for arm in ARMS
        }
        write_run(tmp_path, baseline, "", generative, split="test", build=BUILD)
    report = build_report([tmp_path], resamples=RESAMPLES)
    figure = report_figure(report)
    title = figure.texts[0].get_text() if figure._suptitle is None else figure._suptitle.get_text()  # type: ignore[attr-defined]
    assert title == f"Themisto · split test · build {BUILD}"  # each bar says its n
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.get_title()]  # not the legend's cell
    titles = [ax.get_title() for ax in panels]
    assert titles[0] == "Δ bits/byte: runtime − plain, runtime − placebo"
    assert titles[1] == "Δ exact_match_norm: runtime − plain, runtime − placebo"
    assert "exact_match (strict)" in titles and "exact_match_norm" in titles
    lead = panels[0]
    groups = [label.get_text() for label in lead.get_xticklabels()]
    assert groups == ["output\nruntime − plain", "output\nruntime − placebo", "next cell\nruntime − plain",
                      "next cell\nruntime − placebo"]  # fmt: skip
    (legend_box,) = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None] or figure.legends
    legend = [text.get_text() for text in legend_box.get_texts()]
    # The floors are lines, not bars; the empty baseline stays a bar.
    assert set(legend) == {
        "org/flat",
        "org/helped",
        "themisto-empty",
        "majority floor",
        "heuristic",
        "determinism ceiling",
    }
    markers = {
        model: line
        for model, line in zip(
            [m for m in legend if m.startswith("org/") or m == "themisto-empty"],
            (line for line in lead.get_lines() if line.get_marker() == "D"),
        )
    }
    quoted = {
        (c.model, c.task, c.reference): c
        for c in report.comparisons
        if c.metric == "bits_per_byte" and c.stratum == "all"
    }
    expected = [
        quoted[("org/helped", f"{family}_bpb", arm)].clustered_difference.estimate
        for family in ("themisto_output", "themisto_next_cell")
        for arm in ("plain", "placebo")
    ]
    assert list(np.asarray(markers["org/helped"].get_ydata())) == pytest.approx(expected) and max(expected) < 0
    # Every bar of the paired panel carries its trajectory p; significant ones a star.
    marks = [text.get_text() for text in lead.texts if text.get_text().startswith("p=")]
    assert len(marks) == 8 and sum(text.get_text() == "n=120" for text in lead.texts) == 8
    helped_p = [
        quoted[("org/helped", f"{f}_bpb", arm)].clustered_p_value for f in FAMILIES for arm in ("plain", "placebo")
    ]
    assert all(p < 0.05 for p in helped_p)
    assert sum(mark.endswith("*") for mark in marks) >= 4
    assert all((text.get_fontweight() == "bold") == text.get_text().endswith("*") for text in lead.texts)  # n: normal
    assert "p=1" in marks  # the flat model's placebo difference is exactly 0
    # The majority floor sits at the majority baseline's score over each generative task of the strict panel.
    strict = panels[titles.index("exact_match (strict)")]
    floors = [c for c in strict.collections if c.get_label() == "majority floor"]
    majority = {
        s.task: s.interval.estimate
        for s in report.summaries
        if s.model == "themisto-majority" and s.metric == "exact_match"
    }
    drawn = sorted(float(segment[0][1]) for collection in floors for segment in collection.get_segments())  # type: ignore[attr-defined]
    assert drawn == pytest.approx(sorted(majority.values()))


# --- Real lm-eval runs on a real build: the likelihood control, the baselines, then the report ---


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """themisto eval of the compression control on themisto_bpb and of the floors and the control on all arms."""
    from dataset_fixture import write_dataset

    build = write_dataset(tmp_path_factory.mktemp("build"))
    runs = tmp_path_factory.mktemp("runs")
    generative = "themisto,themisto_output_placebo,themisto_next_cell_placebo"
    for model, tasks in (
        ("themisto-compression", "themisto_bpb"),
        ("themisto-majority", generative),
        ("themisto-heuristic", generative),
        ("themisto-state-lookup", generative),
    ):
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["eval", "--model", model, "--tasks", tasks, "-o", str(runs), "--data", str(build)]) == 0
    plot = runs.parent / f"{runs.name}.png"
    return {"runs": runs, "build": build, "markdown": _report(runs, "--plot", str(plot)), "plot": plot}


def _logged(runs: Path, model: str, task: str) -> list[dict]:
    """The samples lm-eval logged for one model and task."""
    (path,) = (runs / model).glob(f"samples_{task}_2*.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_real_runs_lead_with_the_compression_controls_paired_bits_per_byte(real_runs: dict) -> None:
    markdown = real_runs["markdown"]
    assert markdown.splitlines()[2].startswith(f"Split `test` · build `{real_runs['build']}`")
    rows = _lead(markdown)
    assert set(rows) == {
        ("themisto-compression", f"{family}_bpb", f"runtime − {arm}")
        for family in FAMILIES
        for arm in ("plain", "placebo")
    }
    for family in FAMILIES:
        runtime = _logged(real_runs["runs"], "themisto-compression", f"{family}_runtime_bpb")
        for arm in ("plain", "placebo"):
            other = _logged(
                real_runs["runs"], "themisto-compression", f"{family}{'' if arm == 'plain' else '_' + arm}_bpb"
            )
            # lm-eval logged [loglikelihood, bytes]; the report pairs by example id and leaves empty targets out.
            kept = [s for s in other if s["bits_per_byte"][1] > 0]
            order = [s["doc"]["example_id"] for s in kept]
            a, b = _bpb(kept), _bpb(runtime, order)
            clusters = [s["doc"]["trajectory_id"] for s in kept]
            row = rows[("themisto-compression", f"{family}_bpb", f"runtime − {arm}")]
            assert row["n"] == str(len(kept)) and row["trajectories"] == str(len(set(clusters)))
            expected = paired_bootstrap_ci(a, b, clusters=clusters, resamples=RESAMPLES)
            assert row["Δ [95% CI], trajectories"] == _interval_text(expected, signed=True)
            assert row["p"] == _p_text(sign_flip_p_value(b - a, clusters=clusters, resamples=RESAMPLES))
    # A compressor copies what only the block holds: the runtime block pays off most in that stratum.
    strata = {(r["task"], r["Δ"], r["examples"]): r for r in _table(_section(markdown, STRATA), "model")}
    only = _parse_interval(strata[("themisto_output_bpb", "runtime − plain", "runtime_only")]["Δ [95% CI], examples"])
    rest = _parse_interval(strata[("themisto_output_bpb", "runtime − plain", "rest")]["Δ [95% CI], examples"])
    assert only[0] < 0 and only[0] < rest[0]
    # Three trajectories: the report says what that does to the trajectory p.
    assert "With 3 trajectories the trajectory p cannot fall below 2/2^3 = 0.25" in _section(markdown, LEAD)


def test_real_runs_pair_the_generative_placebo_and_draw_the_floors(real_runs: dict) -> None:
    from matplotlib.image import imread

    markdown = real_runs["markdown"]
    paired = {
        (r["model"], r["task"], r["Δ"], r["metric"]): r
        for r in _table(_section(markdown, "Runtime vs plain and placebo, every other metric"), "model")
    }
    # The state-lookup control gains from the runtime block over its placebo, not only over the plain prompt.
    for arm in ("plain", "placebo"):
        gain = paired[("themisto-state-lookup", "themisto_output", f"runtime − {arm}", "exact_match")]
        assert _parse_interval(gain["Δ [95% CI]"])[1] > 0
    assert ("themisto-compression", "themisto_output_bpb", "runtime − placebo", "greedy_match") in paired
    # The floors ignore the block: every difference 0.
    floor = paired[("themisto-majority", "themisto_output", "runtime − placebo", "exact_match")]
    assert floor["Δ [95% CI]"] == "+0.000 [0.000, 0.000]"
    assert "examples with an empty target have no bits per byte; left out" in _section(markdown, "Notes")
    image = imread(real_runs["plot"])
    assert image.shape[0] > 800 and image[..., :3].std() > 0


def test_without_trajectory_ids_the_lead_falls_back_to_examples(tmp_path: Path) -> None:
    samples = _likelihood_run(7, gain=0.2)
    for rows in samples.values():
        for row in rows:
            row["doc"].pop("trajectory_id", None)
    write_run(tmp_path, "hf", "pretrained=org/m", samples)
    lead = _lead(_report(tmp_path))
    plain = samples["themisto_output_bpb"]
    a = _bpb(plain)
    b = _bpb(samples["themisto_output_runtime_bpb"], [s["doc"]["example_id"] for s in plain])
    row = lead[("org/m", "themisto_output_bpb", "runtime − plain")]
    assert (row["trajectories"], row["Δ [95% CI], trajectories"], row["deff"]) == ("–", "–", "–")
    assert row["p"] == _p_text(sign_flip_p_value(b - a, resamples=RESAMPLES))
    assert row["MDE"] == f"{minimum_detectable_effect(b - a):.3f}"
