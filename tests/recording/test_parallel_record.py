"""``themisto record --jobs N`` and ``--shard I/N``: parallel kernels and deterministic shards.

About a dozen short kernels.
"""

from __future__ import annotations

import random
from pathlib import Path

import nbformat
import pytest

from themisto.cli import main
from themisto.exceptions import InputError
from themisto.recording.sources import SourceTrajectory
from themisto.run_options import RunOptions, select_shard, shard_of
from themisto.trajectory import read_trajectory

NOTEBOOKS = {
    "alpha": ["x = [1, 2, 3]", "x.append(4)\nx", "sum(x)"],
    "beta": ["import math\nr = 2.0", "area = math.pi * r ** 2\nround(area, 3)", "undefined_name"],
    "gamma": ["text = 'abc' * 3", "print(text.upper())", "{'n': len(text)}"],
}


def _write_notebooks(folder: Path) -> Path:
    folder.mkdir()
    for name, cells in NOTEBOOKS.items():
        notebook = nbformat.v4.new_notebook()
        notebook.cells = [nbformat.v4.new_code_cell(code) for code in cells]
        nbformat.write(notebook, folder / f"{name}.ipynb")
    return folder


def _comparable(path: Path) -> list[dict]:
    """A trajectory without what differs between runs (timings, memory)."""
    steps = []
    for step in read_trajectory(path):
        record = step.to_dict()
        del record["execution_time"], record["memory_bytes"]
        steps.append(record)
    return steps


def _sources(ids: list[str]) -> list[SourceTrajectory]:
    return [SourceTrajectory(trajectory_id=name, source=Path(f"{name}.ipynb")) for name in ids]


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_partition_the_inputs_whatever_their_order(count: int) -> None:
    ids = [f"log-{index:04d}" for index in range(300)]
    shuffled = ids[:]
    random.Random(count).shuffle(shuffled)
    shards = [[s.trajectory_id for s in select_shard(_sources(ids), (index, count))] for index in range(count)]
    again = [[s.trajectory_id for s in select_shard(_sources(shuffled), (index, count))] for index in range(count)]
    assert sorted(sum(shards, [])) == ids  # every trajectory in exactly one shard
    assert [sorted(shard) for shard in shards] == [sorted(shard) for shard in again]
    assert all(shard_of(name, count) == index for index, shard in enumerate(shards) for name in shard)
    if count > 1:  # a hash spreads the ids: no shard is empty or holds nearly everything
        assert all(0 < len(shard) < 0.8 * len(ids) for shard in shards)


@pytest.mark.parametrize("shard", [(2, 2), (-1, 2), (0, 0)])
def test_a_shard_outside_its_range_is_refused(shard: tuple[int, int]) -> None:
    with pytest.raises(InputError, match="^shard .*0-based"):
        RunOptions(shard=shard)


@pytest.mark.parametrize("arguments", [["--shard", "1"], ["--shard", "a/b"], ["--shard", "2/2"], ["--jobs", "0"]])
def test_bad_jobs_or_shard_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    folder = _write_notebooks(tmp_path / "nbs")
    assert main(["record", str(folder), "-o", str(tmp_path / "out"), *arguments]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and arguments[0].lstrip("-") in error
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.kernel
def test_two_jobs_record_the_same_trajectories_as_one(tmp_path: Path) -> None:
    folder = _write_notebooks(tmp_path / "nbs")
    assert main(["record", str(folder), "-o", str(tmp_path / "one")]) == 0
    assert main(["record", str(folder), "-o", str(tmp_path / "two"), "--jobs", "2"]) == 0
    for name in NOTEBOOKS:
        serial = _comparable(tmp_path / "one" / f"{name}.jsonl")
        assert len(serial) == len(NOTEBOOKS[name])
        assert _comparable(tmp_path / "two" / f"{name}.jsonl") == serial


@pytest.mark.kernel
def test_shards_record_disjoint_parts_that_make_up_the_whole(tmp_path: Path) -> None:
    folder = _write_notebooks(tmp_path / "nbs")
    recorded = []
    for index in range(2):
        out = tmp_path / f"shard{index}"
        assert main(["record", str(folder), "-o", str(out), "--shard", f"{index}/2"]) == 0
        names = sorted(path.stem for path in out.glob("*.jsonl")) if out.exists() else []
        assert names == sorted(name for name in NOTEBOOKS if shard_of(name, 2) == index)
        recorded += names
    assert sorted(recorded) == sorted(NOTEBOOKS)


@pytest.mark.kernel
def test_a_failing_trajectory_keeps_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write_notebooks(tmp_path / "nbs")
    out = tmp_path / "out"
    out.mkdir()
    (out / "beta.jsonl").write_text("precious\n")  # exists, and neither --resume nor --overwrite
    assert main(["record", str(folder), "-o", str(out), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert "beta: failed:" in err and "--resume" in err
    assert (out / "beta.jsonl").read_text() == "precious\n"
    for name in ("alpha", "gamma"):
        assert len(read_trajectory(out / f"{name}.jsonl")) == len(NOTEBOOKS[name])
