"""The likelihood view: the placebo configs, ``runtime_only``, the ``*_bpb`` tasks and the compression control.

Real builds, a real ``lm_eval`` run of the tiny GPT-2 checked against an independent transformers
computation, real runs of ``themisto-compression``. Most of its time is the lm_eval subprocess.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dataset_fixture import task_rows
from repository import REPOSITORY
from synthetic import write_corpus, write_steps
from tiny_model import make_tiny_model

from themisto.building.categories import runtime_only
from themisto.building.history import StepContext
from themisto.building.parquet import build_dataset
from themisto.building.placebo import KernelState, PlaceboStates, state_before
from themisto.building.prompts import shown_variables
from themisto.building.selection import SelectionOptions
from themisto.evaluation import evaluate, scores
from themisto.evaluation.compression import conditional_bits
from themisto.exceptions import InputError
from themisto.trajectory import Step, Variable, state_hash
from themisto.vocabulary import (
    BPB_GROUP,
    BPB_METRIC,
    BPB_TASKS,
    GREEDY_METRIC,
    LM_EVAL_TASKS,
    PLACEBO_SUFFIX,
    RUNTIME_SUFFIX,
    TARGET_DELIMITER,
    TASKS,
    arm_of,
    is_runtime,
    task_of_config,
)

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# the arm-dependent columns: a placebo row differs from its runtime row in these alone
STATE_COLUMNS = ("runtime", "runtime_text", "prompt", "memory_bytes_before", "execution_time_before", "placebo_of")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Synthetic sessions with restarts, errors and changing variables: room for every placebo tier."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), trajectories=4, steps_each=60)


def placebo_ids(folder: Path, config: str) -> list[str | None]:
    return [row["placebo_of"] for row in task_rows(folder, config, "full")]


# --- the placebo configs ------------------------------------------------------------------------------


def test_a_placebo_prompt_differs_from_the_runtime_prompt_only_in_the_block(data_dir: Path) -> None:
    for task in TASKS:
        for split in ("test", "full"):
            plain = task_rows(data_dir, task, split)
            runtime = task_rows(data_dir, task + RUNTIME_SUFFIX, split)
            placebo = task_rows(data_dir, task + PLACEBO_SUFFIX, split)
            assert [r["example_id"] for r in placebo] == [r["example_id"] for r in runtime]
            for a, b, c in zip(plain, runtime, placebo, strict=True):
                at = b["prompt"].index(b["runtime_text"])  # where the block sits: after the history
                assert b["prompt"] == a["prompt"][:at] + b["runtime_text"] + a["prompt"][at:]
                assert c["prompt"] == a["prompt"][:at] + c["runtime_text"] + a["prompt"][at:]
                # the same header, so the same format; every other column is the runtime row's
                assert c["runtime_text"].startswith("Runtime state of the kernel before this cell (")
                assert {k: v for k, v in b.items() if k not in STATE_COLUMNS} == {
                    k: v for k, v in c.items() if k not in STATE_COLUMNS
                }
                assert a["runtime_only"] == b["runtime_only"] == c["runtime_only"]
                assert a["placebo_of"] is None and b["placebo_of"] is None


def test_the_placebo_shows_the_recorded_state_of_another_step_and_it_is_wrong(data_dir: Path) -> None:
    for task in TASKS:
        runtime = {r["example_id"]: r for r in task_rows(data_dir, task + RUNTIME_SUFFIX, "full")}
        placebo = task_rows(data_dir, task + PLACEBO_SUFFIX, "full")
        for row in placebo:
            own = runtime[row["example_id"]]
            if row["placebo_of"] is None:  # the very first step: no other state known yet
                assert row["example_id"] == placebo[0]["example_id"]
                assert row["runtime_text"] == own["runtime_text"]
                continue
            donor = runtime[row["placebo_of"]]
            # the variables, memory and timing of the donor step's state, and a block that differs
            assert row["runtime"] == donor["runtime"]
            assert row["memory_bytes_before"] == donor["memory_bytes_before"]
            assert row["execution_time_before"] == donor["execution_time_before"]
            assert row["runtime_text"] != own["runtime_text"]
            assert row["placebo_of"] != row["example_id"]
    # nb-arith/3 displays x (42): the placebo is a stale state of its own trajectory where x is not 42
    row = next(r for r in task_rows(data_dir, "output_prediction_placebo", "full") if r["example_id"] == "nb-arith/3")
    trajectory, step = row["placebo_of"].split("/")
    assert trajectory == "nb-arith" and int(step) < 3
    assert all(v.repr != "42" for v in shown_variables(row["runtime_text"]) if v.name == "x")


def test_placebo_states_prefer_the_stale_state_of_the_same_trajectory_and_follow_the_seed(
    corpus: list[Path], tmp_path: Path
) -> None:
    options = SelectionOptions(sample="all", quantile=1.0)
    first = build_dataset(corpus, tmp_path / "a", options)
    build_dataset(corpus, tmp_path / "b", options)
    build_dataset(corpus, tmp_path / "c", SelectionOptions(sample="all", quantile=1.0, seed=7))
    assert first.rows["output_prediction_placebo"]["full"] > 100
    # both tasks of a step show the same placebo state
    output, next_cell = (
        {r["example_id"]: r["placebo_of"] for r in task_rows(tmp_path / "a", config, "full")}
        for config in ("output_prediction_placebo", "next_cell_prediction_placebo")
    )
    shared = output.keys() & next_cell.keys()
    assert len(shared) > 100 and all(output[key] == next_cell[key] for key in shared)
    for config in ("output_prediction_placebo", "next_cell_prediction_placebo"):
        chosen = placebo_ids(tmp_path / "a", config)
        assert chosen == placebo_ids(tmp_path / "b", config)  # reproducible
        assert chosen != placebo_ids(tmp_path / "c", config)  # drawn from the seed
    rows = task_rows(tmp_path / "a", "output_prediction_placebo", "full")
    runtime = {r["example_id"]: r for r in task_rows(tmp_path / "a", "output_prediction_runtime", "full")}
    same = [r for r in rows if r["placebo_of"] and r["placebo_of"].split("/")[0] == r["trajectory_id"]]
    assert len(same) > 0.8 * len(rows)  # a stale state of the session itself, mostly
    for row in same:
        assert int(row["placebo_of"].split("/")[1]) < row["step"]  # stale: from before the step
    # comparable length: on average within a factor of 1.5 of the true block
    ratios = [len(r["runtime_text"]) / len(runtime[r["example_id"]]["runtime_text"]) for r in rows]
    assert 1 / 1.5 < sum(ratios) / len(ratios) < 1.5


def kernel_state(trajectory_id: str, step: int, code: str, **variables: int) -> tuple[StepContext, KernelState]:
    """A step whose kernel holds ``variables`` before it (none: a fresh kernel), and that state."""
    runtime = [Variable(name, "int", 28, repr(value)) for name, value in variables.items()]
    before = None
    if variables:
        before = Step(trajectory_id, step - 1, "c0", "pass", "", None, 0.01, 1000, runtime, state_hash(runtime), False)
    this = Step(trajectory_id, step, "c1", code, "", None, 0.01, 1000, [], state_hash([]), False)
    context = StepContext(this, [], 0, before, "first_run", [0] * len(runtime))
    return context, state_before(context, [vars(v) for v in runtime])


def test_the_placebo_state_is_chosen_tier_by_tier() -> None:
    context, true = kernel_state("t", 9, "x + 1", x=5, y=1)
    stale_x = kernel_state("t", 3, "", x=4, y=1)[1]  # same trajectory, x differs
    stale_y = kernel_state("t", 5, "", x=5, y=2)[1]  # same trajectory, only y (not read) differs
    other_x = kernel_state("u", 7, "", x=6, y=1)[1]  # another trajectory, x differs
    fresh = kernel_state("t", 0, "")[1]  # a fresh kernel: x absent, but empty
    for seed in range(10):
        placebos = PlaceboStates(seed, budget=2000)
        assert placebos.choose(context, true) is None  # nothing known yet
        for state in (fresh, stale_y, other_x, stale_x, true):
            placebos.add(state)
        assert placebos.choose(context, true) == stale_x  # tier 1; the empty state only if nothing else
    placebos = PlaceboStates(0, budget=2000)
    for state in (stale_y, other_x, true):
        placebos.add(state)
    assert placebos.choose(context, true) == other_x  # tier 2: another trajectory's, x differs
    reads_nothing = kernel_state("t", 9, "print('hi')", x=5, y=1)[0]
    assert placebos.choose(reads_nothing, true) == stale_y  # tier 3: stale, differing at all


# --- runtime_only ---------------------------------------------------------------------------------------


def test_runtime_only_is_its_definition_over_whole_word_tokens() -> None:
    # the lookup of the target's tokens in the prompt gives what tokenising both texts gives: a token counts
    # only as a whole run of word characters (``a1`` inside ``ba1_`` is not ``a1``), Unicode ones included
    import random
    import re

    token = re.compile(r"\w+")
    rng = random.Random(7)
    alphabet = "ab1_ é٣.-\n"
    for _ in range(20_000):
        target, block, plain = ("".join(rng.choices(alphabet, k=rng.randint(0, n))) for n in (6, 12, 30))
        only_in_block = set(token.findall(block)) - set(token.findall(plain))
        expected = any(word in only_in_block for word in token.findall(target))
        assert runtime_only(target, block, plain) is expected, (target, block, plain)
        # the plain prompt given as a head and the rest, cut anywhere (inside a token too): the same answer
        cut = rng.randint(0, len(plain))
        assert runtime_only(target, block, plain[cut:], plain[:cut]) is expected, (target, block, plain, cut)
    assert runtime_only("a1", "a1", "ba1_ a1b") and not runtime_only("a1", "a1", "b a1.")
    assert runtime_only("a1", "a1", "1b", "b a") and not runtime_only("a1", "a1", "1 b", "b a")  # a token across


def test_runtime_only_marks_targets_with_a_token_only_the_block_holds(data_dir: Path) -> None:
    assert runtime_only("42", "- x: int\n    42\n", "x = 41\nx = x + 1\n")
    assert not runtime_only("42", "- x: int\n    42\n", "print(42)")  # the plain prompt has it too
    assert not runtime_only("hello", "- s: str\n    'hello'\n", "s = 'hello'")
    assert not runtime_only("", "- x: int\n    42\n", "")
    flags = {r["example_id"]: r["runtime_only"] for r in task_rows(data_dir, "output_prediction_runtime", "full")}
    assert flags["nb-arith/3"]  # 42 was computed (x = x + 1) and never shown before: only the block says it
    assert not flags["nb-arith/4"]  # the same 42, now in the history as the previous output
    assert not flags["nb-text/1"]  # 'hello' is in the code of the history
    assert 0 < sum(flags.values()) < len(flags)


# --- the likelihood tasks -------------------------------------------------------------------------------


def token_loglikelihood(model: Any, tokenizer: Any, context: str, continuation: str) -> float:
    """log P(continuation | context): the sum of log-softmax over the continuation's tokens, in one forward pass,
    the context tokenised as it is (a prompt ends without whitespace, so nothing moves across the boundary)."""
    import torch

    assert context == context.rstrip(), "a prompt ends at its last visible character"
    whole = tokenizer(context + continuation)["input_ids"]
    start = len(tokenizer(context)["input_ids"])
    with torch.no_grad():
        logits = model(torch.tensor([whole])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return float(sum(logprobs[i - 1, whole[i]] for i in range(start, len(whole))))


def test_lm_eval_scores_bits_per_byte_of_the_tiny_gpt2_as_an_independent_computation(
    data_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = make_tiny_model(data_dir, tmp_path / "tiny-gpt2")
    out = tmp_path / "out"
    command = [
        str(Path(sys.executable).parent / "lm_eval"), "run",
        "--include_path", str(REPOSITORY / "lm_eval_tasks"), "--tasks", BPB_GROUP,
        "--model", "hf", "--model_args", f"pretrained={model_dir},dtype=float32",
        "--device", "cpu", "--batch_size", "4", "--limit", "4",
        "--log_samples", "--output_path", str(out),
    ]  # fmt: skip
    env = os.environ | OFFLINE | {"THEMISTO_DATA": str(data_dir)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (results_file,) = out.glob("*/results_*.json")
    results = json.loads(results_file.read_text(encoding="utf-8"))
    assert set(results["results"]) == {BPB_GROUP, *BPB_TASKS}
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    compared = 0
    for task, config in BPB_TASKS.items():
        (path,) = results_file.parent.glob(f"samples_{task}_2*.jsonl")
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        rows = task_rows(data_dir, config)[:4]
        assert [r["doc"]["example_id"] for r in records] == [row["example_id"] for row in rows]
        for record, row in zip(records, rows, strict=True):
            # one request: context = the prompt, continuation = the delimiter and the target
            assert record["arguments"]["gen_args_0"] == {
                "arg_0": row["prompt"],
                "arg_1": TARGET_DELIMITER + row["target"],
            }
            loglikelihood, size = record[BPB_METRIC]
            assert size == len(row["target"].encode("utf-8"))
            assert record[GREEDY_METRIC] in (0, 1)
            assert record["doc"]["runtime_only"] == row["runtime_only"]
            if len(tokenizer(row["prompt"] + row["target"])["input_ids"]) <= 1024:  # not cut by lm-eval
                assert loglikelihood == pytest.approx(
                    token_loglikelihood(model, tokenizer, row["prompt"], TARGET_DELIMITER + row["target"]), abs=1e-4
                )
                compared += 1
        lls, sizes = zip(*(r["bits_per_byte"] for r in records))
        value = results["results"][task]["bits_per_byte,none"]
        assert value == pytest.approx(-sum(lls) / sum(sizes) / math.log(2))  # byte-weighted, in bits
        greedy = results["results"][task]["greedy_match,none"]
        assert greedy == pytest.approx(sum(r["greedy_match"] for r in records) / len(records))
    assert compared >= 12


def test_a_prompt_ends_without_whitespace_and_a_target_keeps_its_own(tmp_path: Path) -> None:
    from themisto.evaluation.harness import task_manager

    table = "   total\n0      3\n1      4"  # a pandas column's repr: the target opens with whitespace
    steps = [Step("t", i, f"c{i}", f"x{i} = {i}\nprint(x{i})", str(i), None, 0.01, 1000, [], f"h{i}") for i in range(5)]
    steps.append(Step("t", 5, "c5", "frame[['total']]", table, None, 0.01, 1000, [], "h5"))
    out = tmp_path / "build"
    build_dataset([write_steps(tmp_path / "t.jsonl", steps)], out, SelectionOptions(sample="all", quantile=1.0))
    loaded = task_manager(str(out), "full").load(["themisto_output_bpb", "themisto_next_cell_runtime_bpb"])["tasks"]
    for name, task in loaded.items():
        for doc in task.test_docs():
            prompt = task.doc_to_text(doc)
            assert prompt == prompt.rstrip() == doc["prompt"], name
            request = task.construct_requests(doc=doc, ctx=prompt, metadata=(name, 0, 1))
            assert request.args == (prompt, "\n" + doc["target"])
    (row,) = [row for row in task_rows(out, "output_prediction", "full") if row["code"] == "frame[['total']]"]
    assert row["target"] == table  # the leading whitespace stays with the target


def test_the_arm_of_a_task_is_its_name() -> None:
    for name, config in LM_EVAL_TASKS.items():
        assert arm_of(name) == arm_of(config)  # the task and the config it reads are of one arm
        assert task_of_config(config) in TASKS
    assert [arm_of(name) for name in BPB_TASKS] == ["", RUNTIME_SUFFIX, PLACEBO_SUFFIX] * 2
    assert is_runtime("themisto_output_runtime_bpb") and not is_runtime("themisto_output_placebo")


# --- the compression control ----------------------------------------------------------------------------


def test_the_compressor_charges_little_for_what_its_context_holds() -> None:
    context = "the quick brown fox jumps over the lazy dog; " * 4 + "df.shape is (5120, 14)\n"
    assert conditional_bits(context, "(5120, 14)") < conditional_bits("df.shape is unknown\n", "(5120, 14)")
    assert conditional_bits(context, "") == 0


def test_the_compression_control_finds_the_information_in_the_block(data_dir: Path, tmp_path: Path) -> None:
    results = evaluate(
        "themisto-compression", tasks=[BPB_GROUP], data=str(data_dir), split="full", output_path=tmp_path
    )
    assert results is not None
    samples = {task: {r["doc"]["example_id"]: r for r in results["samples"][task]} for task in BPB_TASKS}

    def bits(task: str, key: str) -> float:
        loglikelihood, _ = samples[task][key]["bits_per_byte"]
        return -loglikelihood / math.log(2)

    plain, runtime, placebo = "themisto_output_bpb", "themisto_output_runtime_bpb", "themisto_output_placebo_bpb"
    # where only the block holds a token of the target, the runtime prompt makes the target cheaper
    only = [key for key, record in samples[runtime].items() if record["doc"]["runtime_only"]]
    assert only and sum(bits(runtime, k) - bits(plain, k) for k in only) < 0
    assert sum(bits(runtime, k) - bits(placebo, k) for k in only) < 0
    flat = scores(results)
    for other in (plain, placebo):
        delta = flat[f"themisto/{runtime}/bits_per_byte"] - flat[f"themisto/{other}/bits_per_byte"]
        assert flat[f"themisto/delta/{other}/bits_per_byte"] == pytest.approx(delta)
        assert f"themisto/delta/{other}/greedy_match" in flat
    # (the whole split's sign is not asserted: the fixture's targets are a few bytes, and a compressor's whole-byte
    # code lengths make its aggregate a matter of rounding there; the committed builds' figures are in the README)
    # the generative tasks are not its business
    with pytest.raises(InputError, match="only scores likelihoods"):
        evaluate("themisto-compression", tasks=["themisto_output"], data=str(data_dir), limit=1)
