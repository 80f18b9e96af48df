"""Attacks on recorded state: a resume proves what it rebuilds, the snapshot is checked, a bad file never sinks a build.

SECURITY.md, threats 3 and 4. Real kernels, real builds.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pyarrow.parquet as pq
import pytest
from attacks import assert_one_line_error, run_themisto, write_notebook
from synthetic import synthetic_steps, write_corpus, write_steps

from themisto.building.card_reading import parquet_path
from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions
from themisto.cli import main
from themisto.kernel.snapshots import MAX_NAME_CHARS, MAX_TYPE_CHARS
from themisto.recording.options import RecordOptions
from themisto.trajectory import Step, read_trajectory
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
        return _json.dumps({{'generation': 0, 'variables': {FORGED_RECORDS!r}, 'seconds': 0.0, 'omitted': 0, 'unchanged': False}})

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


def test_f12_a_trajectory_whose_state_hash_lies_about_its_runtime_is_skipped_with_one_warning(tmp_path: Path) -> None:
    corpus = tmp_path / "trajectories"
    write_corpus(corpus, 2, 60)
    liar = synthetic_steps("liar", 30)
    changed = next(i for i in range(1, 30) if liar[i].runtime != liar[i - 1].runtime and not liar[i].restarted)
    liar[changed].state_hash = liar[changed - 1].state_hash  # "nothing changed", while the variables did
    write_steps(corpus / "liar.jsonl", liar)
    result = run_themisto("build", str(corpus), "-o", str(tmp_path / "dataset"), "--sample", "all")
    assert result.returncode == 0, result.stderr
    [warning] = result.stderr.strip().splitlines()
    assert warning.startswith(f"skipped {corpus / 'liar.jsonl'}:") and "state_hash of the step before" in warning
    built = pq.read_table(parquet_path(tmp_path / "dataset", TRAJECTORIES, "full"), columns=["trajectory_id"])
    assert set(built.column("trajectory_id").to_pylist()) == {"nb000", "nb001"}


# --- hostile state and input: surrogates, patched library functions, hostile reprs --------------------------------------


def recorded_steps(tmp_path: Path, name: str, cells: list[str], *options: str) -> list[Step]:
    """Record ``cells`` through ``themisto record`` (which must exit 0); the steps."""
    notebook = write_notebook(tmp_path / f"{name}.ipynb", cells)
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"), *options)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return read_trajectory(tmp_path / "out" / f"{name}.jsonl")


def test_c4_a_variable_named_by_a_lone_surrogate_is_recorded_and_the_kernel_lives(tmp_path: Path) -> None:
    named, after = recorded_steps(tmp_path, "surrogate", ["globals()['\\ud800'] = 1", "x = 2\nx"])
    assert named.error is None and [(v.name, v.repr) for v in named.runtime] == [("?", "1")]
    assert not after.restarted and after.output == "2" and sorted(v.name for v in after.runtime) == ["?", "x"]


def test_f9_a_lone_surrogate_in_a_notebooks_code_is_recorded_cleaned(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("s = '\ud800'\nprint(len(s))", id="c0")]
    path = tmp_path / "code.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")  # \ud800 escaped, as a notebook may hold it
    result = run_themisto("record", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    [step] = read_trajectory(tmp_path / "out" / "code.jsonl")
    assert step.code == "s = '?'\nprint(len(s))" and step.output == "1" and step.error is None


def test_c8_a_cell_that_patches_json_dumps_neither_crashes_the_recorder_nor_forges_a_snapshot(tmp_path: Path) -> None:
    cells = [
        "kept = 1",
        "import json\njson.dumps = lambda *args, **kwargs: '{\"forged\": 1}'",
        "z = 4\nz",
    ]
    kept, patched, after = recorded_steps(tmp_path, "dumps", cells, "--timeout", "10")
    assert [v.name for v in kept.runtime] == ["kept"]
    # the kernel packs its messages with the json.dumps of install time (kernel/inside/channels.py)
    assert patched.error is None and sorted(v.name for v in patched.runtime) == ["kept"]
    assert not after.restarted and after.output == "4" and sorted(v.name for v in after.runtime) == ["kept", "z"]


# A cell that makes a variable, prints, and then its snapshot meets the hostile repr below.
HOSTILE_REPRS = {
    # swallows the snapshot's time limit and the recorder's interrupt alike
    "swallow": "class Hostile:\n    def __repr__(self):\n        import time\n        while True:\n"
    "            try:\n                time.sleep(0.05)\n            except BaseException:\n                pass",
    # ends the kernel process
    "exit": "class Hostile:\n    def __repr__(self):\n        import os\n        os._exit(3)",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_REPRS))
def test_c10_c11_a_repr_that_kills_or_hijacks_the_snapshot_is_a_snapshot_error_the_cell_kept(
    tmp_path: Path, kind: str
) -> None:
    cells = [HOSTILE_REPRS[kind] + "\nhostile = Hostile()\nprint('made')", "a = 1\na"]
    hostile, after = recorded_steps(tmp_path, kind, cells, "--timeout", "6", "--repr-timeout", "0.5")
    assert hostile.error is None and hostile.output == "made" and hostile.execution_time < 5
    assert hostile.runtime == [] and hostile.snapshot_error is not None
    expected = "nor stop when interrupted" if kind == "swallow" else "died while taking the snapshot (exit code 3)"
    assert expected in hostile.snapshot_error
    assert after.restarted and after.output == "1" and after.error is None


def test_c10_a_class_changed_to_end_the_kernel_when_an_attribute_is_read_is_a_snapshot_error_the_cell_kept(
    tmp_path: Path,
) -> None:
    # the snapshot after the first cell reuses the object's description on a fingerprint that runs no user code;
    # the second cell changes the class, so the next fingerprint runs its code: the word comes first
    cells = [
        "class Plain:\n    pass\nplain = Plain()",
        "import os\nPlain.__getattribute__ = lambda self, name: os._exit(3)\nprint('made')",
        "a = 1\na",
    ]
    made, changed, after = recorded_steps(tmp_path, "changed", cells, "--timeout", "6", "--repr-timeout", "0.5")
    assert made.error is None and [variable.name for variable in made.runtime] == ["Plain", "plain"]
    # the cell's own step, the snapshot blamed: the word came before the class's code ran (its output, handed to
    # the kernel's socket just before, may still be lost with ZeroMQ's queue when the process ends within microseconds)
    assert changed.error is None and changed.output in ("made", "") and changed.runtime == []
    assert (
        changed.snapshot_error is not None and "died while taking the snapshot (exit code 3)" in changed.snapshot_error
    )
    assert after.restarted and after.output == "1" and after.error is None


def test_c12_a_cell_that_disables_the_timer_still_has_its_slow_repr_cut_short(tmp_path: Path) -> None:
    cell = (
        "import signal, time\nsignal.setitimer = lambda *args, **kwargs: (0.0, 0.0)\n"
        "class Slow:\n    def __repr__(self):\n        time.sleep(60)\n        return 'slow'\n"
        "slow = Slow()\nprint('made')"
    )
    slow, after = recorded_steps(tmp_path, "timer", [cell, "a = 1"], "--timeout", "30", "--repr-timeout", "0.5")
    assert slow.error is None and slow.output == "made" and slow.snapshot_error is None
    described = {variable.name: variable for variable in slow.runtime}
    assert described["slow"].repr_failed and "timed out after 0.5 s" in described["slow"].repr
    assert not after.restarted and "a" in [variable.name for variable in after.runtime]


def test_the_kernel_side_module_calls_what_it_bound_at_install_not_what_a_cell_patched_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import builtins
    import io
    import json as real_json
    import signal as real_signal
    import sys as real_sys

    from themisto.kernel.inside import snapshot

    monkeypatch.setattr(real_json, "dumps", lambda *args, **kwargs: '{"forged": 1}')
    monkeypatch.setattr(real_signal, "setitimer", lambda *args, **kwargs: (0.0, 0.0))
    monkeypatch.setattr(builtins, "len", lambda value: 99)
    monkeypatch.setattr(real_sys, "stdout", io.StringIO())  # data attributes stay live: the streams it guards
    assert snapshot.json.dumps({"a": 1}) == '{"a": 1}'  # type: ignore[attr-defined]
    assert snapshot.signal.setitimer is not real_signal.setitimer  # type: ignore[attr-defined]
    assert snapshot.cheap_len([1, 2]) == 2
    assert snapshot.sys.stdout is real_sys.stdout  # type: ignore[attr-defined]
