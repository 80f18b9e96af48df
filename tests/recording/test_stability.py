"""``themisto stability`` on real kernels: stable steps, named causes, restarts, fidelity, annotated copies."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from themisto.cli import main
from themisto.kernel.recorder import Recorder
from themisto.recording.fidelity import excerpts
from themisto.recording.instability import CLOCK_CALL, CLOCK_WORDS, calls_clock, instability_causes
from themisto.recording.options import RecordOptions
from themisto.trajectory import Step, TrajectoryWriter, read_trajectory

OPTIONS = RecordOptions(timeout=20)
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron"

# (cell id, code) of a session whose steps each exercise one rule; a restart precedes "after_restart".
SESSION = [
    ("unseeded", "import random; print(random.random())"),
    ("seeded", "random.seed(7); print(random.random())"),
    ("still_seeded", "print(random.random())"),  # the seed of the step before still holds
    ("address", "print(object())"),
    ("clock", "import time; print(time.time())"),
    ("set_order", f"print(set({WORDS!r}.split()))"),
    ("assign", "x = 1"),
]
AFTER_RESTART = ("after_restart", "print('x' in globals())")  # False only if the replay restarts too
# (cell id, code, the output the original session printed): equal; equal after normalisation; different twice.
LOGGED = [
    ("same", "print('same')", "same"),
    ("padded", "print('pad   ')", "pad"),
    ("differs", "print(2)", "3"),
    ("differs_again", "print(4)", "5"),
]


@dataclass
class StabilityRun:
    inputs: Path
    output: Path
    exit_code: int
    stdout: str
    summary: dict


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run ``themisto`` in-process and capture what it prints."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(list(args))
    return code, stdout.getvalue(), stderr.getvalue()


def record(path: Path, cells: list[tuple[str, str, str | None]], restart_before: str | None = None) -> None:
    """Record cells ``(cell_id, code, original_output)`` in a real kernel into a trajectory file."""
    with Recorder(path.stem, path.parent, OPTIONS) as recorder, TrajectoryWriter(path) as writer:
        for cell_id, code, original in cells:
            if cell_id == restart_before:
                recorder.restart()
            writer.write(recorder.run_cell(code, cell_id, original))


@pytest.fixture(scope="module")
def stability_run(tmp_path_factory: pytest.TempPathFactory) -> StabilityRun:
    """Record two trajectories, then re-execute both twice with ``themisto stability``."""
    inputs = tmp_path_factory.mktemp("trajectories")
    output = tmp_path_factory.mktemp("annotated")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONHASHSEED", raising=False)  # each kernel draws its own str hash seed
        record(inputs / "session.jsonl", [(c, code, None) for c, code in SESSION + [AFTER_RESTART]], AFTER_RESTART[0])
        record(inputs / "log.jsonl", LOGGED)
        exit_code, stdout, _ = run_cli(
            "stability", str(inputs), "--runs", "2", "-o", str(output), "--workdir", str(inputs), "--timeout", "20"
        )
    summary = json.loads((output / "stability.json").read_text(encoding="utf-8"))
    return StabilityRun(inputs, output, exit_code, stdout, summary)


def annotated_steps(run: StabilityRun, name: str = "session.jsonl") -> dict[str, Step]:
    return {step.cell_id: step for step in read_trajectory(run.output / name)}


# --- determinism -----------------------------------------------------------------------------


@pytest.mark.kernel
def test_the_command_succeeds(stability_run: StabilityRun) -> None:
    assert stability_run.exit_code == 0


@pytest.mark.kernel
def test_seeded_random_is_stable_and_unseeded_is_not(stability_run: StabilityRun) -> None:
    steps = annotated_steps(stability_run)
    assert (steps["unseeded"].stable, steps["unseeded"].stable_norm) == (False, False)
    assert steps["unseeded"].instability == ["random"]
    for cell in ("seeded", "still_seeded"):
        assert (steps[cell].stable, steps[cell].stable_norm, steps[cell].instability) == (True, True, [])


@pytest.mark.kernel
def test_object_repr_differs_only_by_memory_address(stability_run: StabilityRun) -> None:
    step = annotated_steps(stability_run)["address"]
    assert (step.stable, step.stable_norm) == (False, True)
    assert step.instability == ["memory_address"]


@pytest.mark.kernel
def test_clock_reading_is_named_time(stability_run: StabilityRun) -> None:
    step = annotated_steps(stability_run)["clock"]
    assert (step.stable, step.stable_norm, step.instability) == (False, False, ["time"])


@pytest.mark.kernel
def test_printed_set_of_strings_follows_hash_order(stability_run: StabilityRun) -> None:
    step = annotated_steps(stability_run)["set_order"]
    assert (step.stable, step.instability) == (False, ["hash_order"])


@pytest.mark.kernel
def test_restarts_are_replayed(stability_run: StabilityRun) -> None:
    step = annotated_steps(stability_run)["after_restart"]
    assert step.restarted and step.output == "False"
    assert step.stable is True


@pytest.mark.kernel
def test_annotated_copies_change_only_the_stability_fields(stability_run: StabilityRun) -> None:
    for name in ("session.jsonl", "log.jsonl"):
        original = read_trajectory(stability_run.inputs / name)
        annotated = read_trajectory(stability_run.output / name)
        assert len(annotated) == len(original)
        for before, after in zip(original, annotated):
            assert before.stable is None and after.stable is not None
            changed = {k for k, v in after.to_dict().items() if before.to_dict()[k] != v}
            assert changed <= {"stable", "stable_norm", "instability"}


@pytest.mark.kernel
def test_summary_gives_shares_causes_and_the_ceiling(stability_run: StabilityRun) -> None:
    summary = stability_run.summary
    assert summary["runs"] == 2
    session = next(t for t in summary["trajectories"] if t["file"] == "session.jsonl")
    assert (session["steps"], session["stable"], session["stable_norm"]) == (8, 4, 5)
    assert session["causes"] == {"random": 1, "time": 1, "memory_address": 1, "hash_order": 1}
    assert [u["cell_id"] for u in session["unstable"]] == ["unseeded", "address", "clock", "set_order"]
    # 12 steps: the session's 4 stable ones and all 4 of the log (its outputs are deterministic)
    assert summary["overall"]["steps"] == 12
    assert summary["overall"]["ceiling"] == pytest.approx(8 / 12)
    assert summary["overall"]["ceiling_norm"] == pytest.approx(9 / 12)
    ceiling = "determinism ceiling: 66.7% of 12 steps reproduce exactly (75.0% after normalisation)"
    assert ceiling in stability_run.stdout
    row = next(line for line in stability_run.stdout.splitlines() if line.startswith("session.jsonl"))
    assert row.split()[1:4] == ["8", "50.0%", "62.5%"]


# --- fidelity --------------------------------------------------------------------------------


@pytest.mark.kernel
def test_fidelity_compares_the_replay_with_the_original_log(stability_run: StabilityRun) -> None:
    trajectories = {t["file"]: t for t in stability_run.summary["trajectories"]}
    unknown = trajectories["session.jsonl"]["fidelity"]  # no original outputs to compare: unknown, not unequal
    assert (unknown["steps"], unknown["unknown"], unknown["exact_share"]) == (0, 8, None)
    fidelity = trajectories["log.jsonl"]["fidelity"]
    assert (fidelity["steps"], fidelity["exact"], fidelity["norm"]) == (4, 1, 2)
    assert (fidelity["exact_share"], fidelity["norm_share"]) == (0.25, 0.5)
    exact = fidelity["first_divergence"]
    assert (exact["step"], exact["cell_id"], exact["replayed"], exact["original"]) == (1, "padded", "pad   ", "pad")
    norm = fidelity["first_divergence_norm"]
    assert (norm["step"], norm["cell_id"], norm["replayed"], norm["original"], norm["stable"]) == (
        2,
        "differs",
        "2",
        "3",
        True,
    )
    assert stability_run.summary["overall"]["fidelity"]["norm_share"] == 0.5
    assert 'log.jsonl (normalised): step 2, cell differs (reproducible): replayed "2" vs original "3"' in (
        stability_run.stdout
    )


def test_excerpts_centre_on_the_first_difference() -> None:
    before = "x" * 100
    replayed, original = excerpts(before + "A tail", before + "B tail", width=10)
    assert replayed.startswith("…") and original.startswith("…")
    assert "A" in replayed and "B" in original and "B" not in replayed
    assert excerpts("short", "shirt") == ("short", "shirt")


# --- the cause detector on crafted outputs ------------------------------------------------------


@pytest.mark.parametrize(
    ("outputs", "code", "since_restart", "causes"),
    [
        (["1", "1"], "print(random.random())", "", []),  # identical outputs need no cause
        (["run 2024-05-01", "run 2024-05-02"], "print(stamp)", "", ["date"]),
        (["took 3.1 ms", "took 2.7 ms"], "print(f'took {t} ms')", "", ["time"]),
        (["4", "9"], "print(In[2])", "", ["execution_count"]),
        (["140234", "140872"], "print(id(x))", "", ["object_id"]),
        (["1782034", "1733918"], "print(hash('a'))", "", ["hash_order"]),
        (["mean 0.51", "mean 0.48"], "print('mean', x.mean())", "", ["random"]),  # numbers only differ
        (
            ["/tmp/ipykernel_81/2.py:7: FutureWarning", "/tmp/ipykernel_95/2.py:7: FutureWarning"],
            "f()",
            "",
            ["process_id"],
        ),
        (
            ["FileNotFoundError: [Errno 2] No such file or directory: 'a.csv'", ""],
            "read_csv('a.csv')",
            "",
            ["filesystem"],
        ),
        (["abc", "abd"], "print(np.random.rand())", "print(np.random.rand())", ["random"]),
        (["abc", "abd"], "print(np.random.rand())", "np.random.seed(0)\nprint(np.random.rand())", ["other"]),
        (["abc", "abd"], "df.sample(3, random_state=1)", "df.sample(3, random_state=1)", ["other"]),
        (["a b", "b a"], "print(random.sample(xs, 2))", "print(random.sample(xs, 2))", ["random"]),
    ],
)
def test_instability_causes(outputs: list[str], code: str, since_restart: str, causes: list[str]) -> None:
    assert instability_causes(outputs, code, since_restart) == causes


_CLOCK_CODES = [
    "t = time()",
    "t0 = time.time ()",
    "perf_counter_ns()",
    "time.monotonic_ns()",
    "x = process_time()",
    "datetime.now()",
    "datetime.datetime.utcnow ( )",
    "%timeit f()",
    "%%time\nf()",
    "for i in tqdm(xs): pass",
    "from tqdm import tqdm",
    "runtime(3)",  # "time" inside a word: no clock call, though the word is there
    "uptime = 3",
    "nowhere()",
    "snow(1)",
    "%times",
    "tqdm_notebook",
    "import datetime",
    "x = 1",
    "",
]


@pytest.mark.parametrize("code", _CLOCK_CODES)
def test_calls_clock_answers_as_the_clock_pattern_alone(code: str) -> None:
    # the words only rule out code that has none: the pattern decides wherever one is there
    assert calls_clock(code) == (CLOCK_CALL.search(code) is not None)


def test_every_clock_pattern_alternative_holds_a_clock_word() -> None:
    # a pattern alternative without any of the words would be ruled out before it is tried
    for alternative in CLOCK_CALL.pattern.split("|"):
        assert any(word in alternative.replace("\\", "") for word in CLOCK_WORDS), alternative
    matched = [code for code in _CLOCK_CODES if CLOCK_CALL.search(code)]
    assert len(matched) == 11 and all(calls_clock(code) for code in matched)


# --- writing in place and bad input ------------------------------------------------------------


@pytest.mark.kernel
def test_output_folder_may_be_the_input_folder(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    record(path, [("c", "print(6 * 7)", "42")])
    folder = str(tmp_path)
    exit_code, stdout, _ = run_cli("stability", str(path), "--runs", "1", "-o", folder, "--workdir", folder)
    assert exit_code == 0 and "100.0%" in stdout
    [step] = read_trajectory(path)
    assert (step.output, step.stable, step.stable_norm, step.instability) == ("42", True, True, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl", "stability.json"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["missing.jsonl"], "no such trajectory file"),
        (["corrupt.jsonl"], "not valid JSON"),
        (["good.jsonl", "--runs", "0"], "--runs must be at least 1"),
        (["good.jsonl", "--timeout", "0"], "--timeout must be positive, got 0"),
        (["good.jsonl", "--max-output-chars", "0"], "--max-output-chars must be at least 1, got 0"),
        (["good.jsonl", "--workdir", "nowhere"], "working directory"),
        (["good.jsonl", "--kernel", "no-such-kernel"], "unknown kernel"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corrupt.jsonl").write_text("{not json\n", encoding="utf-8")
    (tmp_path / "good.jsonl").write_text("", encoding="utf-8")
    exit_code, stdout, stderr = run_cli("stability", *extra, "-o", "out")
    assert exit_code == 2
    assert stderr.count("\n") == 1 and message in stderr and stderr.startswith("themisto stability: error:")
    assert not (tmp_path / "out").exists()  # nothing is written before the input is known good
