"""The build's deviations from the paper, each an option: shared samples, figure text, timing, masked machine text."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from synthetic import synthetic_steps, write_steps

from themisto.building.card_reading import read_build_options
from themisto.building.history import iter_examples
from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions, select
from themisto.cli import main
from themisto.exceptions import InputError
from themisto.kernel.outputs import mask_machine_text, normalize_output
from themisto.trajectory import Step
from themisto.vocabulary import NEXT_CELL_PREDICTION, OUTPUT_PREDICTION

WARNING = "/tmp/ipykernel_48213/1555216673.py:1: FutureWarning: use observed=False"
MACHINE_TEXT = f"{WARNING}\n<Model object at 0x7f04f8c887c0> saved to /tmp/tmpk2_9xq1z/model.pkl"


def plain_step(number: int, code: str, output: str) -> Step:
    return Step("t", number, f"c{number}", code, output, None, 0.01, 1000, [], f"h{number}")


def special_steps() -> list[Step]:
    """Ordinary steps, then a figure's text, a timing, and an output with machine-dependent text."""
    steps = [plain_step(i, f"x{i} = {i}\nx{i}", str(i)) for i in range(6)]
    steps.append(plain_step(6, "fig = plt.figure()\nfig", "<Figure size 640x480 with 1 Axes>"))
    steps.append(plain_step(7, "%time total = sum(range(10**6))", "CPU times: user 21.3 ms\nWall time: 22 ms"))
    steps.append(plain_step(8, "import time\nt = time.time()\nprint(len(rows))", "14"))  # a clock, no duration
    steps.append(plain_step(9, "model.save()", MACHINE_TEXT))
    steps.append(plain_step(10, "x0 + 1", "1"))
    return steps


@pytest.fixture
def trajectory(tmp_path: Path) -> Path:
    return write_steps(tmp_path / "t.jsonl", special_steps())


def eligible_outputs(path: Path, **options: object) -> list[str]:
    chosen = select([path], SelectionOptions(sample="all", quantile=1.0, **options))  # type: ignore[arg-type]
    return chosen.tasks[OUTPUT_PREDICTION].full


def test_figure_text_counts_as_an_image_unless_kept(trajectory: Path) -> None:
    assert "t/6" not in eligible_outputs(trajectory)
    assert "t/6" in eligible_outputs(trajectory, figure_text_as_image=False)
    assert "t/6" in eligible_outputs(trajectory, include_images=True)
    # the next-cell target is code: the step stays
    assert "t/6" in select([trajectory], SelectionOptions(sample="all")).tasks[NEXT_CELL_PREDICTION].full


def test_measured_durations_leave_output_prediction_unless_kept(trajectory: Path) -> None:
    chosen = eligible_outputs(trajectory)
    assert "t/7" not in chosen and "t/8" in chosen  # reading a clock alone prints no duration
    assert "t/7" in eligible_outputs(trajectory, include_timing=True)


def test_machine_text_is_masked_in_targets_and_history_unless_kept(trajectory: Path) -> None:
    masked = "/tmp/ipykernel_<pid>/1555216673.py:1: FutureWarning: use observed=False\n"
    masked += "<Model object at 0x?> saved to /tmp/tmp<random>/model.pkl"
    assert mask_machine_text(MACHINE_TEXT) == masked
    assert mask_machine_text("hex(255) is 0xff; tmp_cleaned.csv") == "hex(255) is 0xff; tmp_cleaned.csv"
    (target,) = iter_examples([trajectory], OUTPUT_PREDICTION, ["t/9"], SelectionOptions(max_context_chars=10_000))
    (after,) = iter_examples([trajectory], OUTPUT_PREDICTION, ["t/10"], SelectionOptions(max_context_chars=10_000))
    assert target.target == masked and after.history[-1].output == masked
    (raw,) = iter_examples(
        [trajectory], OUTPUT_PREDICTION, ["t/9"], SelectionOptions(max_context_chars=10_000, mask_machine_text=False)
    )
    assert raw.target == MACHINE_TEXT
    # two runs' warnings differ only in the pid: equal once normalised, so stability and fidelity agree
    assert normalize_output(WARNING) == normalize_output(WARNING.replace("48213", "7"))


def test_a_shared_sample_gives_both_tasks_the_same_test_ids(tmp_path: Path) -> None:
    steps = synthetic_steps("s", 600, error_rate=0.0, restart_rate=0.0)
    path = write_steps(tmp_path / "s.jsonl", steps)
    separate = select([path], SelectionOptions())
    shared = select([path], SelectionOptions(samples="shared"))
    output_ids = shared.tasks[OUTPUT_PREDICTION].test
    assert output_ids == separate.tasks[OUTPUT_PREDICTION].test  # the output-prediction draw is unchanged
    next_ids = set(shared.tasks[NEXT_CELL_PREDICTION].test)
    assert next_ids == set(output_ids) & set(shared.tasks[NEXT_CELL_PREDICTION].full) and len(next_ids) >= 190
    assert len(set(separate.tasks[NEXT_CELL_PREDICTION].test) & set(output_ids)) < 150


def test_the_build_cli_takes_every_deviation_option(trajectory: Path, tmp_path: Path) -> None:
    out = tmp_path / "built"
    args = ["build", str(trajectory), "-o", str(out), "--sample", "all", "--quantile", "1", "-q"]
    flags = ["--keep-figure-text", "--include-timing", "--keep-machine-text", "--samples", "shared"]
    assert main([*args, *flags, "--max-context-chars", "0"]) == 0
    (path,) = (out / "output_prediction").glob("full-*.parquet")
    rows = {row["example_id"]: row for row in pq.read_table(path).to_pylist()}
    assert {"t/6", "t/7"} <= rows.keys() and rows["t/9"]["target"] == MACHINE_TEXT
    assert rows["t/10"]["history_dropped"] == 0 and len(rows["t/10"]["history"]) == 10
    build_dataset([trajectory], tmp_path / "default", SelectionOptions(sample="all", quantile=1.0))
    (path,) = (tmp_path / "default" / "output_prediction").glob("full-*.parquet")
    assert {row["example_id"] for row in pq.read_table(path).to_pylist()}.isdisjoint({"t/6", "t/7"})


def test_a_card_of_an_older_build_is_told_to_build_again(trajectory: Path, tmp_path: Path) -> None:
    out = tmp_path / "built"
    build_dataset([trajectory], out, SelectionOptions(sample="all", quantile=1.0))
    card = out / "README.md"
    lines = card.read_text(encoding="utf-8").splitlines(keepends=True)
    card.write_text("".join(line for line in lines if not line.strip().startswith("samples:")), encoding="utf-8")
    with pytest.raises(InputError, match=r"built by an older Themisto \(its build options lack samples\): build it"):
        read_build_options(out)


# What plotting calls return beside the picture, as recorded (addresses as printed).
PLOT_OUTPUTS = [
    "<Axes: xlabel='x', ylabel='y'>\n<image/png>",
    "<seaborn.axisgrid.FacetGrid at 0x7f3a1c2b9d90>\n<image/png>",
    "[<matplotlib.lines.Line2D at 0x7f3a1c2b9d90>, <matplotlib.lines.Line2D at 0x?>]\n<image/png>",
    "Text(0.5, 1.0, 'prices')\n<image/png>",
    "[<matplotlib.lines.Line2D at 0x?>,\n <matplotlib.lines.Line2D at 0x?>]\n<image/png>",  # a list over lines
]


def test_plot_objects_beside_an_image_leave_output_prediction_with_the_images(tmp_path: Path) -> None:
    steps = [plain_step(i, f"x{i} = {i}\nx{i}", str(i)) for i in range(4)]
    steps += [plain_step(4 + i, "df.plot()", output) for i, output in enumerate(PLOT_OUTPUTS)]
    steps.append(plain_step(9, "ax = df.plot()\nprint(ax)", "Axes(0.125,0.11;0.775x0.77)"))  # text, no image
    steps.append(plain_step(10, "df.head(2)", "<Axes: >\n   a\n0  1\n<image/png>"))  # a table too: kept
    path = write_steps(tmp_path / "t.jsonl", steps)
    chosen = eligible_outputs(path)
    assert not {f"t/{4 + i}" for i in range(len(PLOT_OUTPUTS))} & set(chosen)
    assert {"t/9", "t/10"} <= set(chosen)
    assert {f"t/{4 + i}" for i in range(len(PLOT_OUTPUTS))} <= set(eligible_outputs(path, include_images=True))
    assert select([path], SelectionOptions(sample="all")).plot_objects == len(PLOT_OUTPUTS)
    out = tmp_path / "build"
    build_dataset([path], out, SelectionOptions(sample="all", quantile=1.0))
    assert (
        f"so are the {len(PLOT_OUTPUTS)} outputs that show an image beside the plot objects drawn"
        in (out / "README.md").read_text()
    )


def test_an_error_the_stored_output_does_not_show_is_never_a_target_by_default(tmp_path: Path) -> None:
    def failed(number: int, original: str | None) -> Step:
        step = plain_step(number, "np.sqrt(a)", "NameError: name 'np' is not defined")
        step.error, step.original_output = {"ename": "NameError", "evalue": "name 'np' is not defined"}, original
        return step

    steps = [plain_step(i, f"x{i} = {i}\nx{i}", str(i)) for i in range(4)]
    steps += [failed(4, "1.4142135623730951"), failed(5, "NameError: name 'np' is not defined"), failed(6, None)]
    path = write_steps(tmp_path / "t.jsonl", steps)
    assert select([path], SelectionOptions(sample="all")).invented_errors == 1  # the stored output shows none
    with_errors = eligible_outputs(path, include_errors=True)
    assert "t/4" not in with_errors and {"t/5", "t/6"} <= set(with_errors)  # unknown original: not invented
    assert "t/4" in eligible_outputs(path, include_errors=True, include_invented_errors=True)
    assert not {"t/4", "t/5", "t/6"} & set(eligible_outputs(path))
    out = tmp_path / "build"
    build_dataset([path], out, SelectionOptions(sample="all", quantile=1.0))
    card = (out / "README.md").read_text()
    assert "1 of them are errors the replay raised where the source's stored output shows none" in card
    assert "Replay fidelity: of the 2 steps whose source stored an output, 1 reproduce it exactly" in card
