"""The three likelihood arms of an example scored together by ``themisto-hf-shared`` against lm-eval's ``hf``.

The requests are the plain, runtime and placebo arms (prompt, target) of the test
split of a default build (the bundled ``hf_dataset`` when it has the placebo
configs, else ``data/trajectories`` built afresh), for SmolLM2-135M-Instruct (the
``reference-model`` extra) on CPU in float32. lm-eval's ``hf`` runs each arm's
whole prompt; :class:`~themisto.evaluation.shared_prefix.SharedPrefixHFLM` runs
what the arms share once. Two figures, each over one arm as lm-eval pays it
(its three-arm cost / 3), target 1.5x (lm-eval: 3x):

- tokens the model runs, for every test example of both tasks in one walk (as
  ``themisto eval --tasks themisto_bpb`` sends them): exact, free of machine load;
- time, for the three arms of output-prediction examples at quantiles of the
  prompt length (quartiles; --quick: the median), each
  scored by both on the same model object one after the other; their
  log-likelihoods must agree within 1e-4.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from themisto.vocabulary import OUTPUT_PREDICTION, PLACEBO_SUFFIX, RUNTIME_SUFFIX, TASKS

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.5
TOLERANCE = 1e-4
ARMS = ("", RUNTIME_SUFFIX, PLACEBO_SUFFIX)


def _build(scratch: Path) -> Path:
    """A build with the placebo configs: the bundled one when it has them, else the bundled trajectories built."""
    bundled = REPO / "hf_dataset"
    if (bundled / (OUTPUT_PREDICTION + PLACEBO_SUFFIX)).is_dir():
        return bundled
    from themisto.cli import main

    if main(["build", str(REPO / "data" / "trajectories"), "-o", str(scratch / "build"), "-q"]) != 0:
        raise RuntimeError("themisto build failed on data/trajectories")
    return scratch / "build"


def _arm_rows(build: Path, config: str) -> list[list[dict[str, Any]]]:
    """Per test example of the task of ``config``, its plain, runtime and placebo rows."""
    import pyarrow.parquet as pq

    arms = [config, config + RUNTIME_SUFFIX, config + PLACEBO_SUFFIX]
    tables = [pq.read_table(next((build / arm).glob("test-*.parquet"))).to_pylist() for arm in arms]
    examples = [list(rows) for rows in zip(*tables, strict=True)]
    assert all(len({row["example_id"] for row in rows}) == 1 for rows in examples), "the arms' rows are not paired"
    return examples


def _instances(rows: list[dict[str, Any]]) -> list[Any]:
    """lm-eval's requests of a likelihood task for these rows: context = prompt, continuation = target."""
    from lm_eval.api.instance import Instance

    return [Instance("loglikelihood", row, (row["prompt"], row["target"]), 0) for row in rows]


def _token_ratio(lm: Any, examples: list[list[dict[str, Any]]]) -> float:
    """Tokens the shared walk runs for all arms of ``examples`` at once, over one arm's share of lm-eval's hf tokens."""
    from themisto.evaluation.shared_prefix import shared_walk

    pairs = [lm._encode_pair(row["prompt"], row["target"]) for rows in examples for row in rows]
    fitting = [
        (context, continuation) for context, continuation in pairs if len(context + continuation) <= lm.max_length + 1
    ]
    assert len(fitting) == len(pairs), "a prompt is longer than the model's window"
    shared = sum(len(pairs[i][0]) + len(pairs[i][1]) - 1 - start for i, start in shared_walk(pairs))
    hf = sum(len(context) + len(continuation) - 1 for context, continuation in pairs)
    return shared / (hf / len(ARMS))


def run(quick: bool = False) -> list[dict]:
    """Token and time ratios of the shared walk over one arm as lm-eval's hf pays it, and the largest difference."""
    from themisto.evaluation.local_models import SMOLLM2, gguf_path
    from themisto.exceptions import InputError

    rows = {
        "tokens": {"benchmark": "likelihood", "measure": "tokens run, 3 arms of every test example (themisto_bpb)"},
        "time": {"benchmark": "likelihood", "measure": "time, 3 arms by themisto-hf-shared / 1 arm by lm-eval hf"},
    }
    target = f"<= {TARGET_RATIO}x (hf: 3x)"
    try:
        gguf = gguf_path(SMOLLM2)
    except InputError as exc:
        return [row | {"target": target, "value": f"not run: {exc}", "passed": None} for row in rows.values()]
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from themisto.evaluation.shared_prefix import SharedPrefixHFLM

    with tempfile.TemporaryDirectory() as scratch:
        build = _build(Path(scratch))
        examples = {config: _arm_rows(build, config) for config in TASKS}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    plain, shared = (cls(pretrained=model, tokenizer=tokenizer, device="cpu") for cls in (HFLM, SharedPrefixHFLM))
    token_ratio = _token_ratio(plain, [rows for task in examples.values() for rows in task])

    # timed: output-prediction examples at quantiles of the runtime prompt's length, so typical histories
    quantiles = (0.5,) if quick else (0.25, 0.5, 0.75)
    by_length = sorted(examples[OUTPUT_PREDICTION], key=lambda rows: len(rows[1]["prompt"]))
    timed = [_instances(by_length[int(q * (len(by_length) - 1))]) for q in quantiles]
    plain.loglikelihood(timed[0][:1], disable_tqdm=True)  # warm-up: first-call allocations
    seconds = {"hf": 0.0, "shared": 0.0}
    largest_difference = 0.0
    for arms in timed:
        answers = {}
        for name, lm in (("hf", plain), ("shared", shared)):
            started = time.perf_counter()
            answers[name] = lm.loglikelihood(arms, disable_tqdm=True)
            seconds[name] += time.perf_counter() - started
        for (ll_hf, greedy_hf), (ll_shared, greedy_shared) in zip(answers["hf"], answers["shared"], strict=True):
            largest_difference = max(largest_difference, abs(ll_hf - ll_shared) + (greedy_hf != greedy_shared))
    time_ratio = seconds["shared"] / (seconds["hf"] / len(ARMS))
    count = sum(len(task) for task in examples.values())
    return [
        rows["tokens"]
        | {
            "target": target,
            "value": f"{token_ratio:.2f}x ({count} examples, both tasks, one walk as themisto eval runs it)",
            "passed": token_ratio <= TARGET_RATIO,
        },
        rows["time"]
        | {
            "target": f"{target}, |Δ loglik| <= {TOLERANCE}",
            "value": (
                f"{time_ratio:.2f}x ({seconds['shared']:.1f} s vs {seconds['hf']:.1f} s for 3 arms by hf, "
                f"{len(timed)} examples at length quantiles {', '.join(map(str, quantiles))}; "
                f"max |Δ loglik| {largest_difference:.1e})"
            ),
            "passed": time_ratio <= TARGET_RATIO and largest_difference <= TOLERANCE,
        },
    ]


if __name__ == "__main__":
    from run_all import main  # bench/ is on sys.path when a benchmark runs as a script

    sys.exit(main([*sys.argv[1:], Path(__file__).stem]))
