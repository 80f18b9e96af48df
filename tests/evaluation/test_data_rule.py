"""One data rule for every command that reads a build: --data, $THEMISTO_DATA, ./hf_dataset, the bundled build.

Each command says on stderr which build it used and why.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dataset_fixture import write_dataset

from themisto.building.card_reading import parquet_path
from themisto.cli import main
from themisto.evaluation.data import bundled_path, find_data
from themisto.vocabulary import DATA_ENV

BUNDLED = bundled_path("hf_dataset")


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three builds: one for --data, one for the environment, one to copy into a working directory."""
    root = tmp_path_factory.mktemp("builds")
    return {name: write_dataset(root / name) for name in ("given", "env", "cwd")}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory outside the repository, with no $THEMISTO_DATA."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DATA_ENV, raising=False)
    return tmp_path


def first_example(folder: Path) -> str:
    return str(pq.read_table(parquet_path(folder, "output_prediction", "test")).column("example_id")[0])


# (what is set up, the build expected, how the command names the rule)
RULES = [
    (("given", "env", "cwd"), "given", "--data"),
    (("env", "cwd"), "env", f"${DATA_ENV}"),
    (("cwd",), "cwd", "./hf_dataset"),
    ((), "bundled", "the bundled build"),
]


def arrange(
    present: tuple[str, ...], builds: dict[str, Path], workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Set up the sources in ``present``; the --data arguments to pass."""
    if "cwd" in present:
        shutil.copytree(builds["cwd"], workdir / "hf_dataset")
    if "env" in present:
        monkeypatch.setenv(DATA_ENV, str(builds["env"]))
    return ["--data", str(builds["given"])] if "given" in present else []


@pytest.mark.parametrize(("present", "expected", "named"), RULES)
def test_show_and_publish_find_the_build_by_the_same_rule_and_say_which(
    present: tuple[str, ...],
    expected: str,
    named: str,
    builds: dict[str, Path],
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = arrange(present, builds, workdir, monkeypatch)
    folder = {"bundled": BUNDLED, "cwd": workdir / "hf_dataset"}.get(expected) or builds[expected]
    said = f"{folder.resolve()} (from {named})"
    assert find_data(data[1] if data else None).location == str(folder.resolve())

    example = first_example(folder)
    assert main(["show", "output_prediction", example, *data]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"themisto show: {said}"]
    assert pq.read_table(parquet_path(folder, "output_prediction", "test")).column("prompt")[0].as_py() in out

    assert main(["publish", "my-org/themisto", "--dry-run", *data]) == 0
    assert capsys.readouterr().err.splitlines() == [f"themisto publish: {said}"]


def test_eval_uses_the_working_directory_build_and_says_so(
    builds: dict[str, Path], workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    arrange(("cwd",), builds, workdir, monkeypatch)
    command = ["eval", "--model", "themisto-empty", "--tasks", "themisto_output", "--limit", "1", "-o", "run"]
    assert main(command) == 0
    err = capsys.readouterr().err
    assert f"test split of {(workdir / 'hf_dataset').resolve()} (from ./hf_dataset)" in err
    assert list((workdir / "run").glob("*/samples_themisto_output_*.jsonl"))


def test_a_working_directory_build_without_a_card_is_an_error_not_skipped(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "hf_dataset").mkdir()  # e.g. a build interrupted before its card was written
    assert main(["show", "output_prediction", "x/1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hf_dataset (from ./hf_dataset): not a built Themisto dataset" in err


def test_show_needs_a_folder_and_says_so_for_a_hub_id(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "output_prediction", "x/1", "--data", "my-org/themisto"]) == 2
    assert "is a Hub id; this needs a build folder on this machine" in capsys.readouterr().err
