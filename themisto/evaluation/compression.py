"""``themisto-compression``: the likelihood control, a compressor's conditional code length as a log-likelihood.

A language model that can copy from its prompt assigns a target that the
prompt holds a high likelihood. So does a compressor: the code length of the
target given the prompt, ``len(C(prompt + target)) - len(C(prompt))`` bytes, is
small when the target repeats what the prompt says. This model answers
lm-eval's ``loglikelihood`` requests with minus that length in nats (bits ×
ln 2), so the likelihood tasks (group ``themisto_bpb``) score it in bits per
byte like any model: when the runtime block holds what the target says, the
runtime arm costs fewer bits than the plain and the placebo arm, and the paired
pipeline has been shown to see information in the block. It understands
nothing: it only copies, which is all a control of the block's content needs.

The compressor is LZMA2 from the standard library's ``lzma`` (liblzma, the xz
codec), raw format (no header or checksum, which would cancel out anyway),
preset 9 extreme with a 1 MiB dictionary, more than any prompt. LZMA rather
than ``zlib``: its range coder adapts bit by bit, so the increment of a short
target is closer to a true conditional code length than deflate's per-block
Huffman tables, and it codes a repeat of a recent match distance (a copy from
the block) in a few bits. Lengths are whole bytes, so a target costs a
multiple of 8 bits; an increment below zero (a rounding of the coder's final
flush) counts as zero. ``is_greedy`` is always False: a compressor has no
greedy continuation.
"""

from __future__ import annotations

import lzma
import math
from typing import TYPE_CHECKING, Any

import lm_eval.models  # noqa: F401  (the built-in models register first; see themisto.evaluation.baselines)
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from themisto.exceptions import InputError
from themisto.vocabulary import COMPRESSION_BASELINE

if TYPE_CHECKING:
    from lm_eval.api.instance import Instance

_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 20}]
# What lm-eval passes every model besides its --model_args: meaningless for a compressor, so ignored.
_RUN_OPTIONS = frozenset({"batch_size", "max_batch_size", "device"})


def code_length(data: bytes) -> int:
    """The bytes LZMA2 (raw, preset 9 extreme) compresses ``data`` to."""
    return len(lzma.compress(data, format=lzma.FORMAT_RAW, filters=_FILTERS))


def conditional_bits(context: str, continuation: str) -> int:
    """Bits the compressor spends on ``continuation`` after ``context`` (UTF-8), at least 0."""
    before = context.encode("utf-8")
    return 8 * max(0, code_length(before + continuation.encode("utf-8")) - code_length(before))


@register_model(COMPRESSION_BASELINE)
class CompressionModel(LM):  # type: ignore[misc]  # lm-eval is untyped: LM is Any to mypy
    """Log-likelihood = minus the compressor's conditional code length of the continuation, in nats."""

    name = COMPRESSION_BASELINE

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - _RUN_OPTIONS)
        if unknown:
            raise InputError(f"{self.name} takes no model arguments, got {', '.join(unknown)}")
        super().__init__()

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Per request (context, continuation): ``(-bits * ln 2, False)``."""
        return [(-conditional_bits(*request.args) * math.log(2), False) for request in requests]

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """Per request: minus the code length of the whole text, in nats."""
        return [-conditional_bits("", request.args[0]) * math.log(2) for request in requests]

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        raise InputError(f"{self.name} only scores likelihoods: run it on the likelihood tasks (themisto_bpb)")
