"""lm-eval's ``hf`` model scoring log-likelihood requests that share a prompt prefix over one pass of the prefix.

The plain, runtime and placebo prompts of an example share their whole history
(``head + question``, ``head + runtime block + question``, ``head + other block
+ question``), and lm-eval hands a model every log-likelihood request of a run
at once. ``themisto-hf-shared`` (:class:`SharedPrefixHFLM`) sorts the requests'
token sequences and walks them in that order with one key/value cache: each
sequence reuses the cache of the tokens it shares with the one before and runs
the model only over the rest. Sorted order makes this a depth-first walk of the
requests' prefix tree, so every distinct prefix is computed once: the three arms
of an example cost their history once plus two runtime blocks and three
questions and targets, where lm-eval's ``hf`` runs the history three times.

Scores are lm-eval's own: the same ``(context, continuation)`` tokenisation
(lm-eval's ``_encode_pair``), the sum of the target tokens' log-softmax and the
greedy check, so results equal ``--model hf`` to float rounding. Requests longer
than the model's window (lm-eval cuts them from the left, so they share nothing)
and multi-process runs go to lm-eval's own batched code. Generation is lm-eval's.

    themisto eval --model themisto-hf-shared --model-args pretrained=DIR --tasks themisto_bpb -o runs

Any ``hf`` model argument is accepted (``gguf_file``, ``dtype``, ``device``, ...);
``batch_size`` applies to the requests handed back to lm-eval only.
"""

from __future__ import annotations

import inspect
from typing import Any, cast

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from tqdm import tqdm
from transformers import DynamicCache

from themisto.exceptions import InputError
from themisto.vocabulary import SHARED_PREFIX_MODEL

# lm-eval's request for one (context, continuation): the strings, the context's tokens, the continuation's.
Request = tuple[tuple[str, str], list[int], list[int]]


def shared_length(first: list[int], second: list[int]) -> int:
    """How many leading tokens two sequences have in common."""
    return next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))


def shared_walk(pairs: list[tuple[list[int], list[int]]]) -> list[tuple[int, int]]:
    """The order to score (context, continuation) token pairs in: (index, leading tokens reused from the one before).

    Sorted, each pair keeps what it shares with the previous pair's tokens, but at most its context minus the
    last token, whose logits score the first continuation token; the model runs over the rest but the last token.
    """
    order = sorted(range(len(pairs)), key=lambda i: pairs[i][0] + pairs[i][1])
    walk = []
    previous: list[int] = []
    for i in order:
        context, continuation = pairs[i]
        tokens = context + continuation
        walk.append((i, min(shared_length(previous, tokens[:-1]), len(context) - 1)))
        previous = tokens[:-1]
    return walk


@register_model(SHARED_PREFIX_MODEL)
class SharedPrefixHFLM(HFLM):  # type: ignore[misc]  # lm-eval is untyped: HFLM is Any to mypy
    """lm-eval's ``hf`` model (causal LMs) whose ``loglikelihood`` computes each shared prompt prefix once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.backend != "causal":
            raise InputError(f"{SHARED_PREFIX_MODEL} scores causal language models only, not {self.backend}")
        self.tokens_run = 0  # tokens the model was run over by the shared walk (the benchmark reads it)
        # transformers 5.24 renamed the forward's past_key_values to cache
        parameters = inspect.signature(self.model.forward).parameters
        self._cache_argument = "cache" if "cache" in parameters else "past_key_values"
        # Only the continuation's logits are scored: the output layer over the rest is wasted work, most of a small
        # model's with a large vocabulary (Gemma 3 270M: 262,144 rows of width 640, more than its layers' weights).
        self._keeps_logits = "logits_to_keep" in parameters

    def _loglikelihood_tokens(
        self, requests: list[Request], disable_tqdm: bool = False, override_bs: int | None = None
    ) -> list[tuple[float, bool]]:
        """Score ``requests`` in lm-eval's order: (sum of the continuation's log-probabilities, is greedy)."""
        # lm-eval feeds context + continuation minus the last token, cut from the left beyond the window
        fits = [len(context) + len(continuation) <= self.max_length + 1 for _, context, continuation in requests]
        if self.world_size > 1 or not any(fits):
            scored: list[tuple[float, bool]] = super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
            return scored
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        too_long = [i for i, fit in enumerate(fits) if not fit]
        if too_long:
            scored = super()._loglikelihood_tokens([requests[i] for i in too_long], disable_tqdm, override_bs)
            for i, answer in zip(too_long, scored, strict=True):
                results[i] = answer
        fitting = [i for i, fit in enumerate(fits) if fit]
        walk = shared_walk([(requests[i][1], requests[i][2]) for i in fitting])
        cache = DynamicCache()
        cached = 0  # how many tokens the cache holds
        with torch.inference_mode():
            for position, start in tqdm(
                walk, disable=disable_tqdm or self.rank != 0, desc="Running loglikelihood requests"
            ):
                i = fitting[position]
                request_str, context, continuation = requests[i]
                tokens = context + continuation
                if start == 0:
                    cache = DynamicCache()
                elif start < cached:
                    cache.crop(start - cached)  # a negative count drops that many tokens (transformers 4 and 5)
                inputs = torch.tensor([tokens[start:-1]], dtype=torch.long, device=self.device)
                keep = {"logits_to_keep": len(continuation)} if self._keeps_logits else {}
                logits = self.model(input_ids=inputs, use_cache=True, **{self._cache_argument: cache}, **keep).logits[0]
                self.tokens_run += inputs.shape[1]
                cached = len(tokens) - 1
                answer = self._score(logits[-len(continuation) :], continuation)
                results[i] = answer
                if request_str is not None:
                    self.cache_hook.add_partial("loglikelihood", request_str, answer)
        return cast(list[tuple[float, bool]], results)  # every index was scored by one of the two paths

    def _score(self, logits: torch.Tensor, continuation: list[int]) -> tuple[float, bool]:
        """(sum of the continuation tokens' log-softmax, whether each is the argmax), as lm-eval's ``hf`` scores."""
        log_probs = torch.log_softmax(logits, dim=-1, dtype=self.softmax_dtype)
        targets = torch.tensor(continuation, dtype=torch.long, device=log_probs.device)
        greedy = bool((log_probs.argmax(dim=-1) == targets).all())
        return float(log_probs.gather(1, targets.unsqueeze(1)).sum()), greedy
