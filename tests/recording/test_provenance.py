"""Provenance: a trajectory carries how it was made, and stability and ``record --resume`` use it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from themisto import __version__
from themisto.cli import main
from themisto.exceptions import InputError, OptionError
from themisto.kernel import with_recorded
from themisto.kernel.inside import landlock, snapshot
from themisto.provenance import read_provenance, sidecar
from themisto.recording.options import RecordOptions
from themisto.recording.record import record_source
from themisto.recording.sources import JUNE_PLUGIN_PATTERN
from themisto.recording.stability import replay_options
from themisto.recording.zenodo import import_zenodo
from themisto.trajectory import SCHEMA_VERSION, read_trajectory

pytestmark = pytest.mark.kernel  # every test but one records with a real kernel

# The cells need the source's folder as working directory (a relative data file), print more than the
# output cap and hold a variable whose repr is longer than the repr cap: a replay with other options
# than the recording's, or elsewhere, differs from it.
CELLS = ["data = open('data.txt').read()", "print(data * 3)", "big = list(range(200))", "len(data)"]
OPTIONS = ["--max-output-chars", "40", "--max-repr-chars", "20", "--timeout", "30", "--max-cpu-seconds", "300"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``src/`` (a notebook and its data file) and ``out/`` (its trajectory), recorded from elsewhere."""
    root = tmp_path_factory.mktemp("provenance")
    source = root / "src"
    source.mkdir()
    (source / "data.txt").write_text("x" * 30)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code, id=f"c{i}") for i, code in enumerate(CELLS)]
    nbformat.write(notebook, source / "nb.ipynb")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(elsewhere)
        assert main(["record", str(source / "nb.ipynb"), "-o", str(root / "out"), "--max-memory", "4G", *OPTIONS]) == 0
    return root


def copy_of(recorded: Path, tmp_path: Path) -> Path:
    """A copy of the recorded folder the test may change."""
    shutil.copytree(recorded, tmp_path / "copy")
    return tmp_path / "copy"


def installed_libraries() -> dict[str, str]:
    """The versions of the snapshot's libraries installed in this interpreter (the kernel's), found here."""
    found = {}
    for name in snapshot.LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def test_a_recorded_trajectory_carries_how_it_was_made(recorded: Path) -> None:
    data = json.loads((recorded / "out" / "nb.provenance.json").read_text(encoding="utf-8"))
    notebook = (recorded / "src" / "nb.ipynb").read_bytes()
    assert {"numpy", "pandas"} <= data["libraries"].keys()  # the corpus extra installs both
    assert data == {
        "themisto_provenance": 1,
        "made_by": "record",
        "themisto": __version__,
        "schema": SCHEMA_VERSION,
        "python": platform.python_version(),  # the kernel runs this interpreter
        "ipykernel": importlib.metadata.version("ipykernel"),
        "libraries": installed_libraries(),  # read from their metadata inside the kernel
        "sandbox": f"landlock-abi-{landlock.abi_version()}",  # the confinement in force, as this kernel offers it
        "source": {"name": "nb.ipynb", "sha256": hashlib.sha256(notebook).hexdigest(), "path": "../src/nb.ipynb"},
        "options": {
            "timeout": 30.0,
            "kernel_name": "python3",
            "max_repr_chars": 20,
            "repr_timeout": 1.0,
            "max_output_chars": 40,
            "max_raw_output_chars": 1_000_000,
            "max_memory": 4 * 2**30,
            "max_cpu_seconds": 300,
            "max_variables": 1000,
            "isolate_home": False,
            "skip_pattern": JUNE_PLUGIN_PATTERN,
            "notebook_order": "execution",
        },
        "workdir": {"policy": "source", "path": "../src"},
    }
    provenance = read_provenance(recorded / "out" / "nb.jsonl", RecordOptions)
    assert provenance is not None and provenance.workdir == (recorded / "src").resolve()
    assert provenance.options == RecordOptions(
        timeout=30, max_repr_chars=20, max_output_chars=40, max_memory=4 * 2**30, max_cpu_seconds=300
    )
    steps = read_trajectory(recorded / "out" / "nb.jsonl")
    assert steps[1].output_truncated and steps[1].output.startswith("x" * 40 + "\n... [output truncated")
    assert steps[2].runtime[-1].repr_truncated and steps[3].output == "30"


def test_stability_replays_with_the_recorded_options_and_folder(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # neither the notebook's folder nor the one it was recorded from
    annotated = tmp_path / "annotated"
    assert main(["stability", str(recorded / "out"), "--runs", "2", "-o", str(annotated)]) == 0
    assert "100.0%" in capsys.readouterr().out
    steps = read_trajectory(annotated / "nb.jsonl")
    assert [step.stable for step in steps] == [True] * len(CELLS)
    # the annotated copy carries the recording's provenance, its paths written from its own folder
    assert read_provenance(annotated / "nb.jsonl", RecordOptions) == read_provenance(
        recorded / "out" / "nb.jsonl", RecordOptions
    )
    copied = json.loads(sidecar(annotated / "nb.jsonl").read_text(encoding="utf-8"))
    assert copied["workdir"]["path"] != "../src" and copied["workdir"]["policy"] == "source"
    assert (annotated / copied["workdir"]["path"]).resolve() == (recorded / "src").resolve()
    # the working directory is part of the replay environment, which the user may change: elsewhere the
    # data file is missing, so the steps that read it no longer reproduce
    assert main(["stability", str(recorded / "out"), "--runs", "1", "--workdir", str(tmp_path)]) == 0
    assert "filesystem" in capsys.readouterr().out


def test_stability_keeps_the_recorded_caps_and_lets_the_environment_change(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = recorded / "out" / "nb.jsonl"
    assert main(["stability", str(path), "--max-output-chars", "100", "-o", str(tmp_path / "a")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "was recorded with --max-output-chars 40, not 100" in error
    assert not (tmp_path / "a").exists()  # refused before any kernel started
    replay = replay_options(path, RecordOptions(timeout=5, max_memory=2**31), {"timeout", "max_memory"})
    assert (replay.timeout, replay.max_memory, replay.max_cpu_seconds) == (5, 2**31, 300)
    assert (replay.max_output_chars, replay.max_repr_chars, replay.workdir) == (40, 20, (recorded / "src").resolve())
    # an option not chosen takes the recorded value; a chosen cap that differs is refused
    assert replay_options(path, RecordOptions(max_output_chars=100), set()).max_output_chars == 40
    with pytest.raises(OptionError, match="^.*nb.jsonl was recorded with max_output_chars 40, not 100: leave it out"):
        replay_options(path, RecordOptions(max_output_chars=100), {"max_output_chars"})


def test_resume_continues_with_the_recorded_options(recorded: Path, tmp_path: Path) -> None:
    root = copy_of(recorded, tmp_path)
    trajectory = root / "out" / "nb.jsonl"
    lines = trajectory.read_bytes().splitlines(keepends=True)
    trajectory.write_bytes(lines[0])  # interrupted after the first step
    assert main(["record", str(root / "src"), "-o", str(root / "out"), "--resume"]) == 0
    # the new steps are cut at the recorded caps, not the defaults (10,000 and 500 characters)
    steps, original = read_trajectory(trajectory), read_trajectory(recorded / "out" / "nb.jsonl")
    assert [(s.output, s.output_truncated, s.state_hash) for s in steps] == [
        (s.output, s.output_truncated, s.state_hash) for s in original
    ]
    assert sidecar(trajectory).read_bytes() == sidecar(recorded / "out" / "nb.jsonl").read_bytes()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-output-chars", "100"], "was recorded with --max-output-chars 40, not 100"),
        # typed on purpose, even at its default value: it still differs from the recording
        (["--max-output-chars", "10000"], "was recorded with --max-output-chars 40, not 10000"),
        (["--workdir", "."], "was recorded with --workdir (the source's folder), not ."),
        (["--max-memory", "1G"], f"was recorded with --max-memory {4 * 2**30}, not {2**30}"),
    ],
)
def test_resume_refuses_an_option_that_differs_from_the_recording(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    root = copy_of(recorded, tmp_path)
    trajectory = root / "out" / "nb.jsonl"
    trajectory.write_bytes(trajectory.read_bytes().splitlines(keepends=True)[0])
    before = trajectory.read_bytes()
    assert main(["record", str(root / "src"), "-o", str(root / "out"), "--resume", *extra]) == 2
    error = capsys.readouterr().err.splitlines()[-1]  # after the trajectory's own "nb: failed: ..." line
    assert error.startswith("themisto record: error: ") and message in error
    assert error.endswith("leave it out to use the recorded value, or re-record it with --overwrite")
    assert trajectory.read_bytes() == before


def test_python_resume_uses_or_refuses_like_the_cli(recorded: Path, tmp_path: Path) -> None:
    root = copy_of(recorded, tmp_path)
    with pytest.raises(OptionError, match="recorded with max_output_chars 40, not 100: .* overwrite=True$"):
        record_source(root / "src", root / "out", RecordOptions(resume=True, max_output_chars=100))
    recorded_options = read_provenance(root / "out" / "nb.jsonl", RecordOptions)
    assert recorded_options is not None and recorded_options.options is not None
    same = with_recorded(RecordOptions(max_output_chars=40), recorded_options.options, {"max_output_chars"}, "t")
    assert same == recorded_options.options


def test_resume_refuses_a_changed_source_or_other_versions(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_of(recorded, tmp_path)
    trajectory = root / "out" / "nb.jsonl"
    trajectory.write_bytes(trajectory.read_bytes().splitlines(keepends=True)[0])
    before = trajectory.read_bytes()
    notebook = nbformat.read(root / "src" / "nb.ipynb", as_version=4)
    original_source = (root / "src" / "nb.ipynb").read_bytes()
    notebook.cells[-1].source = "len(data) + 1"  # a later cell: the recorded steps still match
    nbformat.write(notebook, root / "src" / "nb.ipynb")
    assert main(["record", str(root / "src"), "-o", str(root / "out"), "--resume"]) == 2
    assert "its source nb.ipynb changed since it was recorded" in capsys.readouterr().err
    (root / "src" / "nb.ipynb").write_bytes(original_source)
    provenance = json.loads(sidecar(trajectory).read_text(encoding="utf-8"))
    sidecar(trajectory).write_text(json.dumps({**provenance, "ipykernel": "0.0.1"}), encoding="utf-8")
    assert main(["record", str(root / "src"), "-o", str(root / "out"), "--resume"]) == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("themisto record: error: ") and "was recorded with ipykernel 0.0.1, but this run" in error
    assert trajectory.read_bytes() == before


def test_a_trajectory_recorded_before_provenance_resumes_as_it_did(recorded: Path, tmp_path: Path) -> None:
    root = copy_of(recorded, tmp_path)
    trajectory = root / "out" / "nb.jsonl"
    sidecar(trajectory).unlink()
    trajectory.write_bytes(trajectory.read_bytes().splitlines(keepends=True)[0])
    assert main(["record", str(root / "src"), "-o", str(root / "out"), "--resume", *OPTIONS]) == 0
    assert len(read_trajectory(trajectory)) == len(CELLS) and not sidecar(trajectory).exists()


def test_a_corpus_moved_as_a_whole_keeps_its_provenance(recorded: Path, tmp_path: Path) -> None:
    root = copy_of(recorded, tmp_path)
    provenance = read_provenance(root / "out" / "nb.jsonl", RecordOptions)
    assert provenance is not None and provenance.workdir == (root / "src").resolve()
    assert provenance.source.path == (root / "src" / "nb.ipynb").resolve()


@pytest.mark.parametrize("text", ["{", "[]", '{"themisto_provenance": 2}', '{"themisto_provenance": 1}'])
def test_a_broken_provenance_file_is_a_one_line_error(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    root = copy_of(recorded, tmp_path)
    sidecar(root / "out" / "nb.jsonl").write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match="not a Themisto provenance file"):
        read_provenance(root / "out" / "nb.jsonl", RecordOptions)
    assert main(["stability", str(root / "out"), "-o", str(tmp_path / "a")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "nb.provenance.json: not a Themisto provenance file" in error


@pytest.mark.parametrize(
    ("value", "message"),
    [("40", "option max_output_chars is '40'"), (0, "max_output_chars must be at least 1, got 0")],
)
def test_an_option_of_the_wrong_type_or_out_of_range_is_refused(
    recorded: Path, tmp_path: Path, value: object, message: str
) -> None:
    root = copy_of(recorded, tmp_path)
    data = json.loads(sidecar(root / "out" / "nb.jsonl").read_text(encoding="utf-8"))
    data["options"]["max_output_chars"] = value
    sidecar(root / "out" / "nb.jsonl").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match=f"nb.provenance.json: not a Themisto provenance file .*{re.escape(message)}"):
        read_provenance(root / "out" / "nb.jsonl", RecordOptions)


def test_an_import_carries_its_data_file(tmp_path: Path) -> None:
    published = [{"code": "x = 1", "output": "", "execution_time": 0.1, "memory_bytes": 1, "variables": {}}]
    published[0]["hash_index"] = "h"
    data = (json.dumps(published) + "\n").encode()
    (tmp_path / "record.json").write_bytes(data)
    (written,) = import_zenodo(str(tmp_path / "record.json"), tmp_path / "out")
    provenance = read_provenance(written, RecordOptions)
    assert provenance is not None and provenance.made_by == "import-zenodo" and provenance.options is None
    assert provenance.source.name == "record.json" and provenance.source.sha256 == hashlib.sha256(data).hexdigest()
    assert provenance.source.path == (tmp_path / "record.json").resolve()
    # Themisto did not record it, so a replay takes the caller's options
    given = RecordOptions(max_output_chars=77)
    assert replay_options(written, given, {"max_output_chars"}) is given
