"""A build validates its input once: selection reads each file whole and remembers the SHA-256 of the valid ones,
the second pass trusts only the same bytes; ``--jobs 2`` scans the later half of the files in a forked process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from synthetic import synthetic_steps, write_corpus, write_steps

import themisto.building.selection
import themisto.trajectory
from themisto.building.selection import SelectionOptions, scan, select
from themisto.exceptions import InputError, TrajectoryError
from themisto.trajectory import ValidatedFiles, iter_steps, read_trajectory


def _rewrite_keeping_size_and_mtime(path: Path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (the same length) in ``path``, and give it back its modification time."""
    assert len(old) == len(new)
    stat = path.stat()
    data = path.read_bytes()
    assert data.count(old) >= 1
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size


def test_a_file_read_again_unchanged_gives_the_steps_a_validating_read_gives(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "t.jsonl", synthetic_steps("t", 60))
    validated = ValidatedFiles()
    first = list(validated.steps(path))
    assert len(validated) == 1
    again = list(validated.steps(path))  # trusted: built without the checks
    assert again == first == read_trajectory(path)
    assert [vars(step).keys() == vars(checked).keys() for step, checked in zip(again, first)] == [True] * 60


def test_records_with_defaults_to_fill_or_unknown_fields_are_built_as_validation_builds_them(tmp_path: Path) -> None:
    lines = []
    for index, step in enumerate(synthetic_steps("t", 20)):
        record = step.to_dict()
        if index % 2:
            del record["interrupt_after"], record["instability"]  # optional: the defaults apply
            record["runtime"] = [{k: v for k, v in var.items() if k != "description"} for var in record["runtime"]]
        else:
            record["written_by"] = "a newer recorder"  # unknown: ignored
        lines.append(json.dumps(record))
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    validated = ValidatedFiles()
    list(validated.steps(path))
    trusted = list(validated.steps(path))
    assert trusted == read_trajectory(path)
    assert all(step.instability == [] for step in trusted[1::2])
    assert trusted[1].instability is not trusted[3].instability  # a fresh default list per step
    assert not any(hasattr(step, "written_by") for step in trusted)


def test_trust_follows_the_bytes_not_the_path_its_size_or_its_time(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "t.jsonl", synthetic_steps("t", 30))
    validated = ValidatedFiles()
    list(validated.steps(path))
    # the same size, the same modification time, one value of the wrong type: validated again, and refused
    _rewrite_keeping_size_and_mtime(path, b'"restarted": false', b'"restarted": "no!"')
    with pytest.raises(TrajectoryError, match=r"t\.jsonl:1 field 'restarted' has type str"):
        list(validated.steps(path))
    assert len(validated) == 1  # the changed file was not found valid
    # the original bytes under another name are trusted: they are what was validated
    copy = write_steps(tmp_path / "copy.jsonl", synthetic_steps("t", 30))
    assert list(validated.steps(copy)) == read_trajectory(copy)
    assert len(validated) == 1


def test_a_file_not_read_to_its_end_or_not_valid_is_not_remembered(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "t.jsonl", synthetic_steps("t", 30))
    validated = ValidatedFiles()
    next(iter(validated.steps(path)))  # a reader that stopped after one step validated one step
    assert len(validated) == 0
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(path.read_bytes() + b'{"step": 30}\n')
    with pytest.raises(TrajectoryError, match="lacks field"):
        list(validated.steps(broken))
    assert len(validated) == 0


def test_a_file_above_the_whole_read_limit_is_streamed_and_validated_at_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_steps(tmp_path / "t.jsonl", synthetic_steps("t", 30))
    monkeypatch.setattr(themisto.trajectory, "WHOLE_FILE_BYTES", path.stat().st_size - 1)
    validated = ValidatedFiles()
    assert list(validated.steps(path)) == list(iter_steps(path))
    assert len(validated) == 0
    _rewrite_keeping_size_and_mtime(path, b'"restarted": false', b'"restarted": "no!"')
    with pytest.raises(TrajectoryError, match="has type str"):
        list(validated.steps(path))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("trajectories")
    paths = write_corpus(folder, trajectories=6, steps_each=80)
    # one invalid file in each half: skipped alike by either scan
    for index in (1, 4):
        lines = paths[index].read_text(encoding="utf-8").splitlines()
        lines[5] = lines[5].replace('"code": ', '"code": 1, "was": ', 1)
        paths[index].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def test_a_scan_in_two_processes_is_the_scan_in_one(corpus: list[Path]) -> None:
    options = SelectionOptions(sample="all")
    one_validated, two_validated = ValidatedFiles(), ValidatedFiles()
    one = scan(corpus, options, validated=one_validated)
    two = scan(corpus, options, validated=two_validated, jobs=2)
    assert two == one
    assert sorted(one[1]) == [corpus[1], corpus[4]]  # a skipped file in each half
    # the digests the second process found valid reach this one: four valid files, trusted in the write pass
    assert len(two_validated) == len(one_validated) == 4
    assert two_validated.digests() == one_validated.digests()
    assert select(corpus, options, jobs=2).tasks == select(corpus, options).tasks


def test_a_step_id_in_both_halves_is_the_corpus_error_either_scan_raises(corpus: list[Path], tmp_path: Path) -> None:
    twin = write_steps(tmp_path / "zz_twin.jsonl", read_trajectory(corpus[0]))  # last: in the second half
    paths = [*corpus, twin]
    messages = []
    for jobs in (1, 2):
        with pytest.raises(InputError, match="occurs twice") as caught:
            scan(paths, SelectionOptions(), jobs=jobs)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and messages[0].startswith(str(twin))


def test_a_scan_process_that_dies_fails_the_selection_in_one_line(
    corpus: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = os.getpid()
    scan_file = themisto.building.selection._scan_file

    def dying(*args: object) -> object:
        if os.getpid() != parent:
            os._exit(5)  # as a second process killed mid-scan
        return scan_file(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(themisto.building.selection, "_scan_file", dying)
    with pytest.raises(RuntimeError, match=r"^the selection's second process ended without an answer \(exit 5\)$"):
        scan(corpus, SelectionOptions(), jobs=2)
