"""The three likelihood arms of an example scored together by ``themisto-hf-shared`` against lm-eval's ``hf``.

The requests are the plain, runtime and placebo arms (prompt, target) of output
prediction examples spread over the test split of a default build (the bundled
``hf_dataset`` when it has the placebo configs, else ``data/trajectories`` built
afresh), scored by SmolLM2-135M-Instruct (the ``reference-model`` extra) on
CPU in float32. lm-eval's ``hf`` (``HFLM.loglikelihood``) runs each arm's whole
prompt; :class:`~themisto.evaluation.shared_prefix.SharedPrefixHFLM` runs the
shared history once. Per example both score the same three requests, one after
the other, on the same model object; the figure is the shared time over one arm
as lm-eval pays it (its three-arm time / 3), target 1.5x (lm-eval: 3x), and the
log-likelihoods must agree within 1e-4.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.5
TOLERANCE = 1e-4
ARM_CONFIGS = ("output_prediction", "output_prediction_runtime", "output_prediction_placebo")


def _build(scratch: Path) -> Path:
    """A build with the placebo configs: the bundled one when it has them, else the bundled trajectories built."""
    bundled = REPO / "hf_dataset"
    if (bundled / ARM_CONFIGS[-1]).is_dir():
        return bundled
    from themisto.cli import main

    if main(["build", str(REPO / "data" / "trajectories"), "-o", str(scratch / "build"), "-q"]) != 0:
        raise RuntimeError("themisto build failed on data/trajectories")
    return scratch / "build"


def _arm_requests(build: Path, examples: int) -> list[list[Any]]:
    """Per example spread evenly over the test split, lm-eval Instances of its three arms (prompt, target)."""
    import pyarrow.parquet as pq
    from lm_eval.api.instance import Instance

    tables = [pq.read_table(next((build / config).glob("test-*.parquet"))).to_pylist() for config in ARM_CONFIGS]
    step = len(tables[0]) // examples
    chosen = []
    for number in range(examples):
        rows = [table[number * step] for table in tables]
        assert len({row["example_id"] for row in rows}) == 1, "the arms' rows are not paired"
        chosen.append([Instance("loglikelihood", row, (row["prompt"], row["target"]), 0) for row in rows])
    return chosen


def run(quick: bool = False) -> list[dict]:
    """Shared-prefix time of the three arms over one arm as lm-eval's hf pays it, and their largest difference."""
    from themisto.evaluation.smollm2 import GGUF_FILE, smollm2_folder
    from themisto.exceptions import InputError

    row = {"benchmark": "likelihood", "measure": "3 arms by themisto-hf-shared / 1 arm by lm-eval hf (SmolLM2-135M)"}
    try:
        folder = smollm2_folder()
    except InputError as exc:
        return [row | {"target": f"<= {TARGET_RATIO}x", "value": f"not run: {exc}", "passed": None}]
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from themisto.evaluation.shared_prefix import SharedPrefixHFLM

    examples = 1 if quick else 3
    with tempfile.TemporaryDirectory() as scratch:
        requests = _arm_requests(_build(Path(scratch)), examples)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype="float32")
    plain, shared = (cls(pretrained=model, tokenizer=tokenizer, device="cpu") for cls in (HFLM, SharedPrefixHFLM))
    plain.loglikelihood(requests[0][:1], disable_tqdm=True)  # warm-up: first-call allocations
    seconds = {"hf": 0.0, "shared": 0.0}
    largest_difference = 0.0
    for arms in requests:
        answers = {}
        for name, lm in (("hf", plain), ("shared", shared)):
            started = time.perf_counter()
            answers[name] = lm.loglikelihood(arms, disable_tqdm=True)
            seconds[name] += time.perf_counter() - started
        for (ll_hf, greedy_hf), (ll_shared, greedy_shared) in zip(answers["hf"], answers["shared"], strict=True):
            largest_difference = max(largest_difference, abs(ll_hf - ll_shared) + (greedy_hf != greedy_shared))
    ratio = seconds["shared"] / (seconds["hf"] / len(ARM_CONFIGS))
    value = (
        f"{ratio:.2f}x ({seconds['shared']:.1f} s vs {seconds['hf']:.1f} s for 3 arms by hf, {examples} examples; "
        f"max |Δ loglik| {largest_difference:.1e})"
    )
    passed = ratio <= TARGET_RATIO and largest_difference <= TOLERANCE
    return [row | {"target": f"<= {TARGET_RATIO}x, |Δ| <= {TOLERANCE}", "value": value, "passed": passed}]


if __name__ == "__main__":
    from run_all import main  # bench/ is on sys.path when a benchmark runs as a script

    sys.exit(main([*sys.argv[1:], Path(__file__).stem]))
