"""Structured descriptions of variables: made in the kernel, bounded whatever the object, shown in every format."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import shutil
import time
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from repository import REPOSITORY

from themisto.building.history import Example
from themisto.building.parquet import build_dataset
from themisto.building.prompts import RUNTIME_FORMATS, RenderOptions, render_pair, shown_variables
from themisto.building.selection import SelectionOptions
from themisto.kernel.inside import snapshot
from themisto.recording.record import record_source
from themisto.trajectory import Variable, read_trajectory
from themisto.vocabulary import OUTPUT_PREDICTION

pytestmark = pytest.mark.kernel  # the tests record real kernels

# A wide frame of mixed dtypes, as a person builds one: 36 columns of nine kinds.
WIDE_FRAME = """\
import numpy as np, pandas as pd
n = 50
kinds = {
    "int": np.arange(n), "float": np.linspace(0, 1, n), "text": [f"s{i}" for i in range(n)],
    "when": pd.date_range("2024-01-01", periods=n, freq="h"), "flag": np.arange(n) % 2 == 0,
    "cat": pd.Categorical(["a", "b"] * (n // 2)), "small": np.arange(n, dtype="int8"),
    "delta": pd.to_timedelta(np.arange(n), unit="s"), "mixed": [1, "x"] * (n // 2),
}
wide = pd.DataFrame({f"{kind}_{i}": values for i in range(4) for kind, values in kinds.items()})
"""
# Other variables, large enough that the block cannot show them all with the frame at the default budget.
CROWD = "\n".join(f"filler_{i} = list(range(400))" for i in range(8))
TARGET = "wide.describe(include='all')"


def frame_columns(frame: pd.DataFrame) -> list[str]:
    """``label dtype`` for each column, as a description lists them."""
    return [f"{label} {dtype}" for label, dtype in frame.dtypes.items()]


@pytest.fixture(scope="module")
def wide_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A notebook recorded in a real kernel whose last cell reads a wide frame; its trajectory and folder."""
    root = tmp_path_factory.mktemp("wide")
    notebook = nbformat.v4.new_notebook()
    cells = [WIDE_FRAME, CROWD, "wide.shape", "x = 1", "x + 1", "y = 2", TARGET]
    notebook.cells = [nbformat.v4.new_code_cell(code, id=f"c{i}") for i, code in enumerate(cells)]
    nbformat.write(notebook, root / "wide.ipynb")
    (trajectory,) = record_source([root / "wide.ipynb"], root / "out")
    return trajectory, root


def test_a_wide_mixed_frame_the_cell_reads_shows_every_column_and_dtype(wide_build: tuple[Path, Path]) -> None:
    trajectory, root = wide_build
    namespace: dict[str, object] = {}
    exec(WIDE_FRAME, namespace)  # the same frame, made here, to know its dtypes independently of the kernel
    expected = frame_columns(namespace["wide"])
    assert len(expected) == 36 and len({line.split()[1] for line in expected}) >= 8
    for runtime_format in RUNTIME_FORMATS:
        out = root / f"build-{runtime_format}"
        render = RenderOptions(runtime_format=runtime_format)
        build_dataset([trajectory], out, SelectionOptions(sample="all", quantile=1.0), render)
        (path,) = (out / "output_prediction_runtime").glob("full-*.parquet")
        (row,) = [row for row in pq.read_table(path).to_pylist() if row["code"] == TARGET]
        block = row["runtime_text"]
        assert len(block) <= render.max_runtime_chars
        (wide,) = [variable for variable in shown_variables(block) if variable.name == "wide"]
        assert wide.description is not None
        listing = wide.description.splitlines()[0]
        assert listing == "columns (36): " + ", ".join(expected)
        assert "index: RangeIndex 0 to 49" in wide.description
        assert "more variables not shown" in block or runtime_format != "text"  # the budget was tight


def test_both_prompts_of_a_pair_name_the_kernels_python_and_libraries(wide_build: tuple[Path, Path]) -> None:
    trajectory, root = wide_build
    out = root / "build-environment"
    build_dataset([trajectory], out, SelectionOptions(sample="all", quantile=1.0))
    line = f"The kernel ran Python {platform.python_version()}"  # the kernel runs this interpreter
    for config in ("output_prediction", "output_prediction_runtime", "next_cell_prediction_runtime"):
        (path,) = (out / config).glob("full-*.parquet")
        for row in pq.read_table(path).to_pylist():
            named = row["prompt"].split("\n\n")[1]
            assert named.startswith(line)
            # the libraries the kernel's cells imported before the step: numpy and pandas, after the first cell
            pandas = f"pandas {importlib.metadata.version('pandas')}"
            assert (pandas in named) == (row["step"] > 0) and "matplotlib" not in named
    bare = root / "bare"
    bare.mkdir(exist_ok=True)
    shutil.copy(trajectory, bare / trajectory.name)  # no provenance beside it: no line, in both arms
    build_dataset([bare / trajectory.name], root / "build-bare", SelectionOptions(sample="all", quantile=1.0))
    (path,) = (root / "build-bare" / "output_prediction").glob("full-*.parquet")
    assert all("The kernel ran" not in row["prompt"] for row in pq.read_table(path).to_pylist())


def test_the_committed_build_shows_every_column_and_dtype_of_the_frames_its_output_cells_read() -> None:
    build = REPOSITORY / "hf_dataset"
    if not (build / "README.md").is_file():
        pytest.skip("no committed build yet: themisto build data/trajectories -o hf_dataset")
    from tools.corpus import block_stats as stats

    reading, whole, _, _ = stats.frames_shown(stats.rows(build, "output_prediction_runtime"))
    assert len(reading) >= 100 and whole >= 0.95 * len(reading)  # the bar; 164 of 164 when measured
    plain = stats.rows(build, "output_prediction_runtime", "test")
    assert not stats.frames_shown([{**row, "runtime_text": ""} for row in plain])[1]  # no block, no columns


def test_the_old_block_is_one_option_away(wide_build: tuple[Path, Path]) -> None:
    trajectory, _ = wide_build
    steps = read_trajectory(trajectory)
    example = Example(OUTPUT_PREDICTION, "w/6", "w", 6, [], 0, TARGET, steps[5].runtime, None, "", False, None)
    described = render_pair(example, RenderOptions()).runtime_text
    plain = render_pair(example, RenderOptions(descriptions=False)).runtime_text
    assert "columns (36): int_0 int64" in described and "columns (" not in plain
    assert all(variable.description is None for variable in shown_variables(plain))


def variable(name: str, description: str | None, repr_text: str = "r" * 250) -> Variable:
    return Variable(name, "pandas.DataFrame", 100, repr_text, shape=[10, 3], len=10, description=description)


@pytest.mark.parametrize("runtime_format", RUNTIME_FORMATS)
def test_under_a_tight_budget_the_read_variables_descriptions_stay_whole(runtime_format: str) -> None:
    descriptions = [f"columns (3): a{i} int64, b{i} str, c{i} float64\nindex: RangeIndex 0 to 9" for i in range(3)]
    runtime = [variable(f"df{i}", text) for i, text in enumerate(descriptions)] + [variable("other", "columns (1)")]
    code = "df0.merge(df1).merge(df2)"
    example = Example(OUTPUT_PREDICTION, "t/1", "t", 1, [], 0, code, runtime, None, "", False, None)
    options = RenderOptions(runtime_format=runtime_format, max_runtime_chars=800)
    block = render_pair(example, options).runtime_text
    assert len(block) <= 800
    shown = {item.name: item for item in shown_variables(block)}
    assert "other" not in shown  # the budget had no room for what the cell does not read
    for i, text in enumerate(descriptions):
        assert shown[f"df{i}"].description == text
        assert len(shown[f"df{i}"].repr) < 250  # the reprs gave way first


def test_descriptions_of_pandas_and_numpy_objects() -> None:
    frame = pd.DataFrame({"price": [1.5, np.nan, 3.0], "name": ["a", "b", "c"]}, index=pd.Index([10, 20, 30]))
    assert snapshot.structure(frame) == "columns (2): price float64, name str\nindex: Index (int64) 10 to 30"
    dated = frame.set_index(pd.date_range("2024-01-01", periods=3, name="day"))
    assert snapshot.structure(dated).endswith(
        "index: DatetimeIndex 2024-01-01 00:00:00 to 2024-01-03 00:00:00, name 'day'"
    )
    assert snapshot.structure(frame["price"]) == "name: 'price', dtype: float64\nindex: Index (int64) 10 to 30"
    assert snapshot.structure(np.array([[3, -2], [7, 0]])) == "dtype: int64, min -2, max 7"
    assert snapshot.structure(np.array([np.nan, 1.0, 4.0])) == "dtype: float64, min 1.0, max 4.0"
    assert snapshot.structure(np.zeros(snapshot.RANGE_ELEMENTS + 1)) == "dtype: float64"  # too big to scan
    assert snapshot.structure({"a": frame, "b": frame}) == "keys: str; values: DataFrame"
    assert snapshot.structure([1, "x", 2]) == "items: int | str"
    for plain in (np.int64(3), 5, "text", [], pd.DataFrame, object()):
        assert snapshot.structure(plain) is None


def test_an_index_that_does_not_increase_reads_as_its_ends_not_a_range() -> None:
    shuffled = pd.DataFrame({"v": [1, 2, 3]}, index=pd.Index([2, 0, 1]))
    assert snapshot.structure(shuffled).endswith("index: Index (int64) first 2, last 1, not sorted")
    assert snapshot.structure(shuffled.sort_index()).endswith("index: Index (int64) 0 to 2")
    assert snapshot.structure(shuffled.head(1)).endswith("index: Index (int64) 2")
    mixed = pd.DataFrame({"v": [1, 2]}, index=pd.Index([1, "a"], dtype=object))  # labels that do not compare
    assert snapshot.structure(mixed).endswith("index: Index (object) first 1, last 'a', not sorted")


def test_a_frame_wider_than_the_cap_lists_the_cap_and_counts_the_rest() -> None:
    width = snapshot.DESCRIBED_COLUMNS + 50
    frame = pd.DataFrame(np.zeros((2, width)), columns=[f"c{i}" for i in range(width)])
    listing = snapshot.structure(frame).splitlines()[0]
    assert listing.startswith(f"columns ({width}): c0 float64, c1 float64")
    assert listing.endswith(f"c{snapshot.DESCRIBED_COLUMNS - 1} float64, ... 50 more")


def test_long_labels_keep_the_description_bounded() -> None:
    frame = pd.DataFrame(np.zeros((1, 100)), columns=["x" * 500 + str(i) for i in range(100)])
    text = snapshot.structure(frame)
    assert text is not None and len(text) <= snapshot.DESCRIPTION_CHARS and "x" * snapshot.LABEL_CHARS not in text


class HangingColumns:
    """A frame look-alike whose ``columns`` never returns: the description must give up in time."""

    shape = (3, 2)
    dtypes = ("int64", "int64")

    @property
    def columns(self) -> list[str]:
        while True:
            time.sleep(0.01)


class RaisingDtypes:
    """A frame look-alike whose ``dtypes`` raises SystemExit."""

    shape = (3, 2)
    columns = ("a", "b")

    @property
    def dtypes(self) -> tuple[str, ...]:
        raise SystemExit(3)


def test_a_hostile_frame_look_alike_leaves_the_rest_of_the_record() -> None:
    started = time.monotonic()
    record = snapshot.describe("h", HangingColumns(), 50, 0.2)
    assert time.monotonic() - started < 2 and record["description"] is None and record["shape"] == [3, 2]
    record = snapshot.describe("r", RaisingDtypes(), 50, 1.0)
    assert record["description"] is None and not record["repr_failed"]


def test_reprs_mask_memory_addresses() -> None:
    record = snapshot.describe("f", object(), 100, 1.0)
    assert re.fullmatch(r"<object object at 0x\?>", record["repr"])
