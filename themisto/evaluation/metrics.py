"""Per-sample metrics: exact match (strict and normalised), ROUGE-L F1 and chrF.

Every function takes ``(pred, ref)`` strings and returns a float in [0, 1], so
all four metrics share one scale in tables, plots and paired differences.

Both strings empty: ``exact_match`` and ``exact_match_norm`` give 1.0 (the
strings are equal); ``rougeL`` and ``chrf`` give 0.0, as their reference
implementations (``rouge_score``, ``sacrebleu``) do.
"""

from __future__ import annotations

from collections import Counter

from rapidfuzz.distance import LCSseq

from themisto.kernel import normalize_output

# rouge_score's default tokeniser lowercases, replaces every run of characters
# outside [a-z0-9] by a space and splits. The same tokens come out, several
# times faster than a regex, when the lowercased text is encoded to ASCII (any
# other character becomes "?") and a byte table blanks everything but [a-z0-9].
_ROUGE_TOKEN_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")
_ROUGE_SEPARATORS = bytes(c if c in _ROUGE_TOKEN_BYTES else ord(" ") for c in range(256))


def exact_match(pred: str, ref: str) -> float:
    """1.0 when the strings are identical, character for character, else 0.0."""
    return float(pred == ref)


def exact_match_norm(pred: str, ref: str) -> float:
    """Exact match after :func:`normalize_output` on both sides."""
    return float(normalize_output(pred) == normalize_output(ref))


def rouge_tokens(text: str) -> list[bytes]:
    """The tokens of ``rouge_score``'s default tokeniser (no stemming), as ASCII bytes."""
    return text.lower().encode("ascii", "replace").translate(_ROUGE_SEPARATORS).split()


def rouge_l(pred: str, ref: str) -> float:
    """ROUGE-L F1, equal to ``RougeScorer(["rougeL"]).score(ref, pred)["rougeL"].fmeasure``."""
    pred_tokens = rouge_tokens(pred)
    ref_tokens = rouge_tokens(ref)
    if not pred_tokens or not ref_tokens:
        return 0.0
    # rapidfuzz takes token lists directly (hashing each token), faster than mapping
    # tokens to code points first.
    lcs = LCSseq.similarity(ref_tokens, pred_tokens)
    # The same operations, in the same order, as rouge_score, so the floats are equal.
    precision = lcs / len(pred_tokens)
    recall = lcs / len(ref_tokens)
    if precision + recall > 0:
        return 2 * precision * recall / (precision + recall)
    return 0.0


# sacrebleu's CHRF defaults: character n-grams of orders 1-6, no word n-grams,
# beta 2, whitespace removed, precision and recall averaged over the orders
# both sides have ("effective order"), no epsilon smoothing.
CHRF_ORDER = 6
CHRF_BETA_SQUARED = 4


def _char_ngrams(text: str) -> Counter[str]:
    """Counts of every character n-gram of orders 1..6, all in one counter (their lengths differ)."""
    grams: list[str] = []
    for n in range(1, CHRF_ORDER + 1):
        grams += [text[i : i + n] for i in range(len(text) - n + 1)]
    return Counter(grams)


def chrf(pred: str, ref: str) -> float:
    """Sentence chrF on a 0-1 scale: ``sacrebleu.metrics.CHRF().sentence_score(pred, [ref]).score / 100``.

    The same statistics as sacrebleu, computed with one n-gram counter per side
    instead of six, and the n-gram totals from the lengths alone, which makes
    it faster than calling sacrebleu per sample.
    """
    hyp = "".join(pred.split())
    ref = "".join(ref.split())
    if not hyp or not ref:
        return 0.0
    small, large = sorted((_char_ngrams(hyp), _char_ngrams(ref)), key=len)
    matches = [0] * (CHRF_ORDER + 1)  # clipped matches per order
    get = large.get
    for gram, count in small.items():
        other = get(gram)
        if other:
            matches[len(gram)] += count if count < other else other
    precision = recall = 0.0
    orders = 0
    for n in range(1, CHRF_ORDER + 1):
        hyp_total, ref_total = len(hyp) - n + 1, len(ref) - n + 1
        if hyp_total > 0 and ref_total > 0:
            precision += matches[n] / hyp_total
            recall += matches[n] / ref_total
            orders += 1
    precision /= orders
    recall /= orders
    if precision + recall == 0:
        return 0.0
    return (1 + CHRF_BETA_SQUARED) * precision * recall / (CHRF_BETA_SQUARED * precision + recall)


def score_sample(pred: str, ref: str) -> dict[str, float]:
    """All four metrics of one prediction, keyed by their lm-eval metric names."""
    return {
        "exact_match": exact_match(pred, ref),
        "exact_match_norm": exact_match_norm(pred, ref),
        "rougeL": rouge_l(pred, ref),
        "chrf": chrf(pred, ref),
    }
