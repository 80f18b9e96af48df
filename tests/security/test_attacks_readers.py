"""Attacks on the readers: JuNE logs, notebooks and built Parquet files are read strictly.

SECURITY.md, threat 10. What is read is run in a real kernel where it matters.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from attacks import assert_one_line_error, run_themisto, write_notebook
from synthetic import write_corpus

from themisto.cli import main
from themisto.recording.sources.june import read_june_log
from themisto.recording.zenodo import MAX_FILE_BYTES, MAX_TOTAL_BYTES
from themisto.trajectory import read_trajectory


def june_row(time: object, event: str, source: object = "", cell: str = "a", cell_type: str = "code") -> dict:
    return {
        "time": time,
        "kernel_id": "kernel-1",
        "event": event,
        "cell_index": cell,
        "cell_type": cell_type,
        "cell_source": source,
        "cell_output": "",
    }


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.kernel
def test_a_cell_source_given_as_lines_runs_as_the_joined_code(tmp_path: Path) -> None:
    log = write_jsonl(
        tmp_path / "lines.jsonl",
        [
            june_row(1, "execute", ["x = 20\n", "y = x + 1\n", "print(x + y)"]),
            june_row(2, "execute", "x", cell="b"),
            # markdown with stray spaces (a hand-exported log) is still markdown, never run
            june_row(3, "execute", "this is *not* code", cell="c", cell_type=" Markdown "),
        ],
    )
    [source] = read_june_log(log)
    assert [action.code for action in source.executions] == ["x = 20\ny = x + 1\nprint(x + y)", "x"]
    assert main(["record", str(log), "-o", str(tmp_path / "out")]) == 0
    [trajectory] = (tmp_path / "out").glob("*.jsonl")
    lines, value = read_trajectory(trajectory)
    assert lines.output == "41" and value.output == "20"


@pytest.mark.parametrize("source", [{"code": "x = 1"}, 42, True, ["x = 1\n", 2]], ids=["dict", "int", "bool", "mixed"])
def test_a_cell_source_of_another_type_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: object
) -> None:
    log = write_jsonl(tmp_path / "typed.jsonl", [june_row(1, "execute", "a = 1"), june_row(2, "execute", source)])
    assert main(["record", str(log), "-o", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "record", "row 2: cell_source is", "not text or a list of lines")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("times", "row", "kind"),
    [
        ([1, 2, "2023-05-06 10:32:26.282", 4], 3, "is a timestamp, but row 1's is a number"),
        (["2023-05-06 10:32:26.282", "2023-05-06 10:32:27.000", 3], 3, "is a number, but row 1's is a timestamp"),
        ([1, "soon", 3], 2, "is not a timestamp (nor a number)"),
    ],
)
def test_a_mixed_time_column_blames_the_row_that_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], times: list[object], row: int, kind: str
) -> None:
    log = write_jsonl(tmp_path / "times.jsonl", [june_row(time, "execute", "1") for time in times])
    assert main(["record", str(log), "-o", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "record", f"row {row}: time", kind)


def test_a_notebook_without_code_cells_says_no_trajectory_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notebook = write_notebook(tmp_path / "prose.ipynb", [])
    assert main(["record", str(notebook), "-o", str(tmp_path / "out")]) == 2
    assert_one_line_error(capsys.readouterr().err, "record", "no code cells", "no trajectory was written")
    assert not list((tmp_path / "out").glob("*.jsonl"))


@pytest.mark.parametrize("damage", ["empty", "corrupt"])
def test_a_damaged_parquet_file_under_show_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    trajectories = tmp_path / "trajectories"
    write_corpus(trajectories, 2, 30)
    dataset = tmp_path / "dataset"
    assert main(["build", str(trajectories), "-o", str(dataset)]) == 0
    [split] = (dataset / "output_prediction").glob("test*.parquet")
    split.write_bytes(b"" if damage == "empty" else split.read_bytes()[: split.stat().st_size // 2] + b"garbage")
    capsys.readouterr()
    assert main(["show", "output_prediction", "nb000/3", "--data", str(dataset)]) == 2
    assert_one_line_error(capsys.readouterr().err, "show", f"{split}: not a readable Parquet file")


def test_f17_a_small_zip_whose_members_inflate_past_the_total_is_refused_before_any_is_read(tmp_path: Path) -> None:
    from zenodo_records import published_steps

    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for index in range(3):
            bundle.writestr(f"nb{index}.json", json.dumps(published_steps(1)))
    # each member declares 300 MB, under the limit of one member, as three members of zeros would
    member = 300 << 20
    assert member < MAX_FILE_BYTES < 3 * member and MAX_TOTAL_BYTES < 3 * member
    data = bytearray(archive.read_bytes())
    entry = -1
    for _ in range(3):
        entry = data.index(b"PK\x01\x02", entry + 1)
        data[entry + 24 : entry + 28] = member.to_bytes(4, "little")
    archive.write_bytes(bytes(data))
    result = run_themisto("import-zenodo", str(archive), "-o", str(tmp_path / "out"))
    assert result.returncode == 2
    assert_one_line_error(result.stderr, "import-zenodo", f"over {MAX_TOTAL_BYTES} bytes uncompressed in all")
    assert not (tmp_path / "out").exists()
