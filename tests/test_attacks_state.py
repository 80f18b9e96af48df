"""Attacks on recorded state: a resume proves what it rebuilds, the snapshot is checked, a bad file never sinks a build.

SECURITY.md, threats 3 and 4. Real kernels, real builds.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from attacks import assert_one_line_error, run_themisto, write_notebook
from synthetic import synthetic_steps, write_corpus, write_steps

from themisto.building.parquet import build_dataset, parquet_path
from themisto.building.tasks import SelectionOptions
from themisto.cli import main
from themisto.recording.kernel import MAX_NAME_CHARS, MAX_TYPE_CHARS
from themisto.recording.options import RecordOptions
from themisto.trajectory import read_trajectory
from themisto.vocabulary import TRAJECTORIES

pytestmark = pytest.mark.kernel  # every test but one records with a real kernel (that one builds for seconds)

# --- --resume proves its state -------------------------------------------------------------------


def truncate(trajectory: Path, steps: int) -> bytes:
    """Keep the first ``steps`` lines of a trajectory, as a run stopped there would; the bytes kept."""
    kept = b"".join(trajectory.read_bytes().splitlines(keepends=True)[:steps])
    trajectory.write_bytes(kept)
    return kept


def test_a_resume_whose_replay_diverges_stops_naming_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notebook = write_notebook(tmp_path / "random.ipynb", ["a = 1", "import random\nr = random.random()", "r * 2"])
    out = tmp_path / "out"
    assert main(["record", str(notebook), "-o", str(out)]) == 0
    trajectory = out / "random.jsonl"
    kept = truncate(trajectory, 2)
    capsys.readouterr()
    assert main(["record", str(notebook), "-o", str(out), "--resume"]) == 2
    assert_one_line_error(capsys.readouterr().err, "record", "step 1 does not reproduce on resume")
    assert trajectory.read_bytes() == kept  # nothing written from a state that is not the recorded one
    assert main(["record", str(notebook), "-o", str(out), "--resume", "--resume-diverged", "continue"]) == 0
    steps = read_trajectory(trajectory)
    assert trajectory.read_bytes().startswith(kept)
    assert [step.resume_diverged_at for step in steps] == [None, None, 1]


def test_a_resume_that_reproduces_the_state_continues_unmarked(tmp_path: Path) -> None:
    # functions and objects print memory addresses, which differ from run to run: not a divergence
    cells = ["def f():\n    return 1", "class A:\n    pass\n\na = A()\na", "s = {3, 1, 2}\nprint(f(), s, f)", "x = 1"]
    notebook = write_notebook(tmp_path / "stable.ipynb", cells)
    out = tmp_path / "out"
    assert main(["record", str(notebook), "-o", str(out)]) == 0
    truncate(out / "stable.jsonl", 3)
    assert main(["record", str(notebook), "-o", str(out), "--resume"]) == 0
    steps = read_trajectory(out / "stable.jsonl")
    assert [step.code for step in steps] == cells and steps[3].resume_diverged_at is None


# Every step of a tiny trajectory is an example: the build must take the snapshots whatever they hold.
EVERY_STEP = SelectionOptions(sample="all", quantile=1.0, include_errors=True, include_empty=True, min_history=0)

# --- the snapshot is checked, not trusted --------------------------------------------------------

# A cell that makes the kernel-side snapshot answer once with forged records, then restores it.
FORGED_RECORDS = [
    {"name": "good", "type": "int", "size_bytes": 28, "repr": "1"},
    {"name": "huge", "type": "Big", "size_bytes": 2**70, "repr": "b"},  # no 64-bit integer holds it
    {"name": "surrogate", "type": "str", "size_bytes": 50, "repr": "\ud800x"},  # cleaned, kept
    {"name": "n" * (MAX_NAME_CHARS + 1), "type": "int", "size_bytes": 28, "repr": "1"},
    {"name": "typed", "type": 5, "size_bytes": 28, "repr": "1"},
    7,
    {"name": "good", "type": "int", "size_bytes": 28, "repr": "2"},  # a second "good"
    {"name": "unknown"},  # "unchanged since the last snapshot", of a variable there never was
    {"name": "shape", "type": "x", "size_bytes": 1, "repr": "s", "shape": [2**64]},
    {"name": "typename", "type": "t" * (MAX_TYPE_CHARS + 1), "size_bytes": 1, "repr": "t"},
    {"name": "long", "type": "str", "size_bytes": 5000, "repr": "r" * 5000},  # cut to --max-repr-chars
]
FORGE = f"""import json as _json, sys as _sys
_module = _sys.modules['_themisto_snapshot']
_original = _module.take

class _Text:
    def __repr__(self):
        return _json.dumps({{'generation': 0, 'variables': {FORGED_RECORDS!r}, 'seconds': 0.0}})

def _forged(*args):
    _module.take = _original
    return _Text()

_module.take = _forged"""


def test_forged_snapshot_records_are_dropped_and_named(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "forged.ipynb", [FORGE, "after = 1"])
    out = tmp_path / "out"
    assert main(["record", str(notebook), "-o", str(out)]) == 0
    forged, after = read_trajectory(out / "forged.jsonl")
    assert [variable.name for variable in forged.runtime] == ["good", "surrogate", "long"]
    assert forged.runtime[1].repr == "?x"
    assert forged.runtime[2].repr == "r" * RecordOptions().max_repr_chars and forged.runtime[2].repr_truncated
    assert forged.snapshot_error is not None and forged.snapshot_error.startswith("8 variable record(s) dropped")
    assert [variable.name for variable in after.runtime] == ["after"] and after.snapshot_error is None
    build_dataset([out / "forged.jsonl"], tmp_path / "dataset", EVERY_STEP)


def test_a_broken_snapshot_is_named_and_the_module_installed_again(tmp_path: Path) -> None:
    cells = ["kept = 1\nimport sys\ndel sys.modules['_themisto_snapshot']", "after = 2"]
    notebook = write_notebook(tmp_path / "broken.ipynb", cells)
    assert main(["record", str(notebook), "-o", str(tmp_path / "out")]) == 0
    broken, after = read_trajectory(tmp_path / "out" / "broken.jsonl")
    # not a silent empty namespace: the step says the snapshot failed
    assert broken.runtime == [] and broken.snapshot_error is not None and "snapshot failed" in broken.snapshot_error
    assert [variable.name for variable in after.runtime] == ["after", "kept"] and after.snapshot_error is None


def test_hostile_namespaces_never_empty_later_snapshots(tmp_path: Path) -> None:
    cells = [
        "class Big:\n    nbytes = 2**70\n\nbig = Big()",
        "globals()[1] = 2",
        "class Exit:\n    def __repr__(self):\n        raise SystemExit(1)\n\nexit_ = Exit()",
        "class Interrupt:\n    def __repr__(self):\n        raise KeyboardInterrupt\n\n"
        "    def __len__(self):\n        raise SystemExit\n\ninterrupt = Interrupt()",
        "after = 1",
    ]
    notebook = write_notebook(tmp_path / "hostile.ipynb", cells)
    out = tmp_path / "out"
    assert main(["record", str(notebook), "-o", str(out)]) == 0
    steps = read_trajectory(out / "hostile.jsonl")
    assert all(step.error is None and step.runtime and step.snapshot_error is None for step in steps)
    last = {variable.name: variable for variable in steps[-1].runtime}
    assert sorted(last) == ["Big", "Exit", "Interrupt", "after", "big", "exit_", "interrupt"]
    assert last["exit_"].repr_failed and last["interrupt"].repr_failed and last["interrupt"].len is None
    assert last["big"].size_bytes is not None and last["big"].size_bytes < 2**63
    build_dataset([out / "hostile.jsonl"], tmp_path / "dataset", EVERY_STEP)


def test_max_variables_caps_a_snapshot_and_counts_the_rest(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "many.ipynb", ["for i in range(20000):\n    globals()[f'v{i:05d}'] = i"])
    out = tmp_path / "out"
    assert main(["record", str(notebook), "-o", str(out), "--max-variables", "100"]) == 0
    [step] = read_trajectory(out / "many.jsonl")
    assert [variable.name for variable in step.runtime] == ["i"] + [f"v{i:05d}" for i in range(99)]  # by name
    assert step.runtime_omitted == 20000 + 1 - 100  # the loop's own `i` too
    assert (out / "many.jsonl").stat().st_size < 100_000


# --- one bad trajectory never fails a build -------------------------------------------------------


def test_build_skips_invalid_trajectories_with_one_warning_each(tmp_path: Path) -> None:
    corpus = tmp_path / "trajectories"
    write_corpus(corpus, 3, 60)
    huge = synthetic_steps("huge", 20)
    huge[5].memory_bytes = 2**70  # what a trusted snapshot once let through
    write_steps(corpus / "huge.jsonl", huge)
    twice = synthetic_steps("twice", 20)
    write_steps(corpus / "twice.jsonl", twice + twice)  # what two writers left
    result = run_themisto("build", str(corpus), "-o", str(tmp_path / "dataset"), "--sample", "all")
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 2
    assert warnings[0].startswith(f"skipped {corpus / 'huge.jsonl'}:") and "64 bits" in warnings[0]
    assert warnings[1].startswith(f"skipped {corpus / 'twice.jsonl'}:") and "occurs twice" in warnings[1]
    assert "skipped 2 invalid trajectory file(s)" in result.stdout
    built = pq.read_table(parquet_path(tmp_path / "dataset", TRAJECTORIES, "full"), columns=["trajectory_id"])
    assert set(built.column("trajectory_id").to_pylist()) == {"nb000", "nb001", "nb002"}
