"""The report's figure as a paper would print it: a model scored on 2 examples beside baselines on 200.

Sample logs are written by lm-eval's own tracker (tests/sample_logs.py); the figure is rendered through
``themisto report --plot`` in each file type and its parts are read back from the matplotlib figure.
"""

from __future__ import annotations

import contextlib
import io
import random
import time
from pathlib import Path

import pytest
from sample_logs import lm_eval_likelihood_sample, lm_eval_sample, write_run

from themisto.cli import main
from themisto.reporting.analysis import Report, build_report
from themisto.reporting.plot import model_colours, report_figure
from themisto.vocabulary import BASELINES, COMPRESSION_BASELINE

FAMILIES = ("themisto_output", "themisto_next_cell")
ARMS = ("", "_runtime", "_placebo")
TARGETS = ["42", "(3, 4)", "df.head()", "['a', 'b']", "print(x)"]


def docs(n: int) -> list[dict]:
    """``n`` dataset rows over 10 trajectories (only the fields the report reads matter)."""
    return [
        {"example_id": f"t{i % 10}/{i}", "trajectory_id": f"t{i % 10}", "step": i, "prompt": f"p{i}",
         "target": TARGETS[i % len(TARGETS)], "stable": True}
        for i in range(n)
    ]  # fmt: skip


def generative(n: int, rate: float, seed: int) -> dict[str, list[dict]]:
    """Samples of the six generative tasks on the first ``n`` rows, right at ``rate``."""
    rng = random.Random(seed)
    rows = docs(n)
    return {
        family + arm: [
            lm_eval_sample(i, doc, doc["target"] if rng.random() < rate else "x") for i, doc in enumerate(rows)
        ]
        for family in FAMILIES
        for arm in ARMS
    }


def likelihood(n: int, seed: int) -> dict[str, list[dict]]:
    """Samples of the six likelihood tasks on the first ``n`` rows."""
    rng = random.Random(seed)
    rows = docs(n)
    return {
        family + arm + "_bpb": [
            lm_eval_likelihood_sample(i, doc, -rng.uniform(1, 9), greedy=rng.random() < 0.3)
            for i, doc in enumerate(rows)
        ]
        for family in FAMILIES
        for arm in ARMS
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model scored on 2 examples, another on 200, and the baselines on 200, as one run folder."""
    folder = tmp_path_factory.mktemp("runs")
    write_run(folder, "hf", "pretrained=org/SmolLM2-135M", {**generative(2, 0.5, 1), **likelihood(2, 1)}, split="test")
    write_run(folder, "hf", "pretrained=org/Big-7B", {**generative(200, 0.4, 2), **likelihood(200, 2)}, split="test")
    for seed, (baseline, rate) in enumerate(
        (("themisto-majority", 0.05), ("themisto-heuristic", 0.2), ("themisto-empty", 0.0))
    ):
        write_run(folder, baseline, "", generative(200, rate, 10 + seed), split="test")
    return folder


def report_of(*folders: Path) -> Report:
    return build_report(list(folders), resamples=200)


def visible(figure: object) -> list:
    return [ax for ax in figure.axes if ax.get_visible()]  # type: ignore[attr-defined]


def panels_of(figure: object) -> list:
    """The panels with data (the legend's cell has no title)."""
    return [ax for ax in visible(figure) if ax.get_title()]


def test_every_bar_says_its_n_and_no_cell_of_the_grid_is_blank(runs: Path) -> None:
    figure = report_figure(report_of(runs))
    panels = panels_of(figure)
    titles = [ax.get_title() for ax in panels]
    assert titles[:2] == [
        "Δ bits/byte: runtime − plain, runtime − placebo",
        "Δ exact_match_norm: runtime − plain, runtime − placebo",
    ]
    assert "greedy_match" in titles and "exact_match (strict)" in titles
    # every cell of the grid holds a panel or the legend: none is blank
    rows, columns = panels[0].get_gridspec().get_geometry()
    assert len(visible(figure)) == rows * columns
    (legend_cell,) = [ax for ax in visible(figure) if not ax.get_title()]
    assert legend_cell.get_legend() is not None
    assert not any(str(n) in figure._suptitle.get_text() for n in (2, 200))  # type: ignore[attr-defined]
    for ax in panels:
        texts = [text.get_text() for text in ax.texts]
        bars = sum(len(container) for container in ax.containers if hasattr(container, "patches"))
        assert sum(text.startswith("n=") for text in texts) == bars > 0, ax.get_title()
    lead = [text.get_text() for text in panels[0].texts]
    assert "n=2" in lead and "n=200" in lead


def test_task_labels_read_as_task_and_arm(runs: Path) -> None:
    figure = report_figure(report_of(runs))
    panels = panels_of(figure)
    ticks = {ax.get_title(): [label.get_text() for label in ax.get_xticklabels()] for ax in panels}
    assert ticks["exact_match (strict)"] == [
        "output\nplain", "output\nruntime", "output\nplacebo", "next cell\nplain", "next cell\nruntime", "next cell\nplacebo"
    ]  # fmt: skip
    contrasts = [
        "output\nruntime − plain",
        "output\nruntime − placebo",
        "next cell\nruntime − plain",
        "next cell\nruntime − placebo",
    ]
    # both paired panels sort the arms alike
    assert ticks[panels[0].get_title()] == ticks[panels[1].get_title()] == contrasts
    assert not any("themisto_" in label or "_bpb" in label for labels in ticks.values() for label in labels)


def test_p_values_never_cover_a_marker(runs: Path) -> None:
    figure = report_figure(report_of(runs))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in panels_of(figure)[:2]:
        labels = [text.get_window_extent(renderer) for text in ax.texts]
        markers = [
            point
            for line in ax.get_lines()
            if line.get_marker() == "D"
            for point in ax.transData.transform(list(zip(line.get_xdata(), line.get_ydata())))
        ]
        assert markers and labels
        assert not [box for box in labels for x, y in markers if box.contains(x, y)]
        # and no two labels overlap
        assert not [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :] if a.overlaps(b)]


def test_a_model_keeps_its_colour_and_the_tasks_their_order_in_another_report(runs: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    write_run(other, "hf", "pretrained=org/Big-7B", {**generative(30, 0.4, 5), **likelihood(30, 5)}, split="test")
    write_run(other, "hf", "pretrained=org/Aardvark-1B", generative(30, 0.1, 6), split="test")

    def colours_and_ticks(figure: object) -> tuple[dict[str, tuple], list[str]]:
        panel = next(ax for ax in panels_of(figure) if ax.get_title() == "chrf")
        colours = {
            container.get_label(): container.patches[0].get_facecolor()
            for container in panel.containers
            if hasattr(container, "patches")
        }
        return colours, [label.get_text() for label in panel.get_xticklabels()]

    first, first_ticks = colours_and_ticks(report_figure(report_of(runs)))
    second, second_ticks = colours_and_ticks(report_figure(report_of(other)))
    assert first["org/Big-7B"] == second["org/Big-7B"] != second["org/Aardvark-1B"]
    assert first_ticks == second_ticks
    assert len(set(first.values())) == len(first)  # one colour per model


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_the_file_is_of_the_type_its_suffix_names(runs: Path, tmp_path: Path, suffix: str, magic: bytes) -> None:
    path = tmp_path / f"report{suffix.upper() if suffix == '.pdf' else suffix}"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(runs), "--plot", str(path), "--resamples", "200"]) == 0
    assert path.read_bytes().startswith(magic)
    if suffix == ".svg":
        assert b"<svg" in path.read_bytes()[:1000]


def test_another_suffix_or_an_unwritable_file_is_refused_before_the_bootstrap(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = {
        "--plot": (tmp_path / "report.jpg", "a plot is written as PNG, PDF or SVG"),
        "-o": (blocker / "report.md", f"{blocker} is a file, not a folder"),
    }
    for flag, (path, expected) in cases.items():
        started = time.perf_counter()
        assert main(["report", str(runs), flag, str(path)]) == 2  # with the default 10,000 resamples, were it to start
        assert time.perf_counter() - started < 2.0
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and expected in captured.err, captured
    assert not (tmp_path / "report.jpg").exists()


def _hue(colour: str) -> float:
    """The hue of a ``#rrggbb`` colour, as a fraction of the colour circle."""
    import colorsys

    return colorsys.rgb_to_hsv(*(int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)))[0]


@pytest.mark.parametrize("with_baselines", [False, True])
def test_two_models_of_a_figure_get_hues_apart_not_two_shades_of_one(with_baselines: bool) -> None:
    # the reference runs' two models hashed to two shades of tab20's red before; any pair of names must differ
    names = ["SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m", *(f"org/model-{i}" for i in range(30))]
    fixed = [*BASELINES, COMPRESSION_BASELINE] if with_baselines else []
    close = []
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            colours = model_colours([first, second, *fixed])
            hues = [_hue(colours[first]), _hue(colours[second])] + [_hue(colours[m]) for m in fixed]
            distance = min(abs(hues[0] - hues[1]), 1 - abs(hues[0] - hues[1]))
            if distance < 20 / 360 or any(
                min(abs(h - o), 1 - abs(h - o)) < 20 / 360 for h in hues[:2] for o in hues[2:]
            ):
                close.append((first, second))
    assert not close
