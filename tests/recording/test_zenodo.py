"""The Zenodo importer on local files in the published shape (never downloads)."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest
from zenodo_records import published_steps

from themisto.building.selection import SelectionOptions, select
from themisto.cli import main
from themisto.exceptions import InputError, SourceError
from themisto.kernel.outputs import render_outputs
from themisto.recording.zenodo import import_zenodo
from themisto.trajectory import read_trajectory, state_hash


def test_json_trajectories_become_trajectory_jsonl(tmp_path: Path) -> None:
    source = tmp_path / "record"
    source.mkdir()
    (source / "notebook_a.json").write_text(json.dumps(published_steps(4)), encoding="utf-8")
    (source / "notebook_b.json").write_text(json.dumps({"steps": published_steps(2)}), encoding="utf-8")
    written = import_zenodo(str(source), tmp_path / "out")
    assert [p.name for p in written] == ["notebook_a.jsonl", "notebook_b.jsonl"]
    steps = read_trajectory(written[0])
    assert [s.step for s in steps] == [0, 1, 2, 3]
    third = steps[2]
    assert (third.trajectory_id, third.code, third.output) == ("notebook_a", "x = 2\nprint(x * 2)", "4\n")
    assert (third.execution_time, third.memory_bytes, third.state_hash) == (2.25, 1_000_002, "hash2")
    assert [(v.name, v.type, v.size_bytes, v.repr) for v in third.runtime] == [("x", "int", 28, "2")]
    # the imported files feed the builder directly
    assert len(select(written, SelectionOptions(sample="all")).tasks["output_prediction"].full) >= 5


def test_csv_in_a_zip_with_nbformat_outputs_and_errors(tmp_path: Path) -> None:
    rows = published_steps(3)
    rows[1]["output"] = json.dumps(
        [
            {"output_type": "stream", "name": "stdout", "text": ["a\n"]},
            {"output_type": "error", "ename": "KeyError", "evalue": "'k'", "traceback": []},
        ]
    )
    table = tmp_path / "nb.csv"
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "runtime_variables": json.dumps(row["runtime_variables"])})
    archive = tmp_path / "themisto.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.write(table, "data/nb.csv")
    (written,) = import_zenodo(str(archive), tmp_path / "out")
    steps = read_trajectory(written)
    assert steps[1].runtime[0].repr == "1"
    # CSV carries the outputs as JSON text, which is kept as the text it is
    assert steps[1].output.startswith("[{")
    nbformat = published_steps(1)
    nbformat[0]["output"] = json.loads(rows[1]["output"])
    (tmp_path / "nb2.json").write_text(json.dumps(nbformat), encoding="utf-8")
    (converted,) = import_zenodo(str(tmp_path / "nb2.json"), tmp_path / "out2")
    (step,) = read_trajectory(converted)
    assert step.output == "a\nKeyError: 'k'"
    assert step.error == {"ename": "KeyError", "evalue": "'k'"}


def test_nbformat_outputs_are_rendered_as_the_recorder_renders_them(tmp_path: Path) -> None:
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": ["loading", "...\n"]},
        {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/html": "<b>x</b>"}, "metadata": {}},
        {"output_type": "execute_result", "data": {"text/plain": ["   a\n", "0  1"]}, "execution_count": 3},
        {"output_type": "stream", "name": "stderr", "text": "warning\n"},
    ]
    steps = published_steps(1)
    steps[0]["output"] = outputs
    (tmp_path / "nb.json").write_text(json.dumps(steps), encoding="utf-8")
    (converted,) = import_zenodo(str(tmp_path / "nb.json"), tmp_path / "out")
    (step,) = read_trajectory(converted)
    assert step.output == render_outputs(outputs) == "loading...\n<image/png>\n   a\n0  1\nwarning"
    assert step.error is None


def test_mismatched_fields_fail_with_one_line_naming_found_and_expected(tmp_path: Path) -> None:
    bad = tmp_path / "nb.json"
    bad.write_text(json.dumps([{"cell": "x = 1", "result": "", "mem": 3}]), encoding="utf-8")
    with pytest.raises(SourceError) as info:
        import_zenodo(str(bad), tmp_path / "out")
    message = str(info.value)
    assert "\n" not in message
    assert "found fields cell, mem, result" in message
    assert "expected code" in message and "hash_index" in message and "runtime_variables" in message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_cli_reports_bad_sources_as_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "nb.json"
    broken.write_text("[{", encoding="utf-8")
    assert main(["import-zenodo", str(broken), "-o", str(tmp_path / "out")]) == 2
    assert main(["import-zenodo", str(tmp_path / "absent"), "-o", str(tmp_path / "out")]) == 2
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    assert main(["import-zenodo", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "out")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3
    assert "not valid JSON" in errors[0] and "no such file" in errors[1] and "unsupported file type" in errors[2]


def test_a_failed_import_keeps_the_previous_complete_file(tmp_path: Path) -> None:
    good = tmp_path / "nb.json"
    good.write_text(json.dumps(published_steps(2)), encoding="utf-8")
    (target,) = import_zenodo(str(good), tmp_path / "out")
    before = target.read_bytes()
    broken = published_steps(2)
    broken[1]["runtime_variables"] = 7
    good.write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(SourceError, match="runtime variables are int"):
        import_zenodo(str(good), tmp_path / "out", overwrite=True)
    assert target.read_bytes() == before


def test_odd_values_are_read_leniently_or_rejected_in_one_line(tmp_path: Path) -> None:
    steps = published_steps(2)
    steps[0]["code"] = ["x = 0\n", "print(x * 2)"]  # nbformat's list-of-lines source
    steps[0]["runtime_variables"] = [
        {"name": "a", "size": float("inf"), "shape": ["n", 3], "repr": 0},
        {"name": "b", "size": "28", "shape": [2, "3"], "len": 2},
    ]
    (tmp_path / "nb.json").write_text(json.dumps(steps), encoding="utf-8")
    (converted,) = import_zenodo(str(tmp_path / "nb.json"), tmp_path / "out")
    first = read_trajectory(converted)[0]
    assert first.code == "x = 0\nprint(x * 2)"
    a, b = first.runtime
    assert (a.size_bytes, a.shape, a.repr) == (None, None, "0")  # not a number, not all dimensions, a repr of 0
    assert (b.size_bytes, b.shape, b.len) == (28, [2, 3], 2)

    steps[1]["memory_bytes"] = 2**70  # beyond the dataset's int64 columns: the build could not read it
    (tmp_path / "big.json").write_text(json.dumps(steps), encoding="utf-8")
    with pytest.raises(InputError, match="big.json step 1 field 'memory_bytes' does not fit in 64 bits"):
        import_zenodo(str(tmp_path / "big.json"), tmp_path / "out_big")
    lines = [json.dumps(step) for step in published_steps(3)]
    lines[2] = lines[2][:-1]
    (tmp_path / "cut.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"cut.jsonl:3: not valid JSON"):
        import_zenodo(str(tmp_path / "cut.jsonl"), tmp_path / "out_cut")


def test_fields_a_release_may_omit_are_optional_and_the_hash_is_computed(tmp_path: Path) -> None:
    steps = [
        {"code": "x = 1", "output": "", "time": "2023-05-06 10:32:26.282"},  # a timestamp, not a duration
        {"code": "x", "output": "1", "time": 1683369146.282, "variables": {"x": {"type": "int", "repr": "1"}}},
        {"code": "x + 1", "output": "2", "time": "0.25"},
    ]
    (tmp_path / "nb.json").write_text(json.dumps(steps), encoding="utf-8")
    (converted,) = import_zenodo(str(tmp_path / "nb.json"), tmp_path / "out")
    first, second, third = read_trajectory(converted)
    assert [s.execution_time for s in (first, second, third)] == [0.0, 0.0, 0.25]
    assert (first.memory_bytes, first.runtime, first.state_hash) == (None, [], state_hash([]))
    assert second.state_hash == state_hash(second.runtime) != first.state_hash  # as the recorder hashes


def _timed_steps(before: bool) -> list[dict]:
    """A session whose published runtime is the state after each step, or before it."""
    cells = ["a = 1", "b = a + 1", "c = b * 3", "print(a + b + c)"]
    states = [["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c"]]
    if before:
        states = [[]] + states[:-1]
    return [
        {"code": code, "output": "", "runtime_variables": {name: {"type": "int", "repr": "0"} for name in state}}
        for code, state in zip(cells, states)
    ]


def test_runtime_before_the_step_is_detected_reported_and_shifted(tmp_path: Path) -> None:
    (tmp_path / "after.json").write_text(json.dumps(_timed_steps(before=False)), encoding="utf-8")
    (tmp_path / "before.json").write_text(json.dumps(_timed_steps(before=True)), encoding="utf-8")
    notices: list[str] = []
    after, before = import_zenodo(str(tmp_path), tmp_path / "out", notice=notices.append)
    assert notices == ["before.json (before): runtime is the state before each step, shifted to the state after it"]
    expected = [["a"], ["a", "b"], ["a", "b", "c"], []]  # the state after the last step was never published
    assert [[v.name for v in s.runtime] for s in read_trajectory(before)] == expected
    assert [[v.name for v in s.runtime] for s in read_trajectory(after)][:3] == expected[:3]


def test_a_zip_member_that_inflates_past_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("steps.json", json.dumps(published_steps(1)))
    # declare a 3 GiB member in the central directory, as a zip of zeros that inflates to 3 GiB does
    data = bytearray(archive.read_bytes())
    entry = data.index(b"PK\x01\x02")
    data[entry + 24 : entry + 28] = (3 << 30).to_bytes(4, "little")
    archive.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"member steps.json is 3221225472 bytes uncompressed, over the"):
        import_zenodo(str(archive), tmp_path / "out")
