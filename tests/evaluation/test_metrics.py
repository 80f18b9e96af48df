"""The per-sample metrics agree with their reference libraries and their documented rules."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_score.rouge_scorer import RougeScorer
from rouge_score.tokenize import tokenize as rouge_score_tokenize
from sacrebleu.metrics import CHRF

from themisto.evaluation.metrics import chrf, exact_match, exact_match_norm, rouge_l, rouge_tokens, score_sample
from themisto.kernel.outputs import normalize_output
from themisto.vocabulary import METRIC_NAMES

ROUGE = RougeScorer(["rougeL"])
CHRF_REFERENCE = CHRF()

# Pieces of Python code and notebook outputs, with punctuation, unicode (the
# Kelvin sign and dotted capital I lowercase to ASCII letters) and whitespace.
FRAGMENTS = [
    "df.head()",
    "print(x)",
    "import numpy as np",
    "x = [1, 2, 3]",
    "for i in range(10):",
    "    total += i",
    "def f(a, b=2):",
    "return a + b",
    "plt.show()",
    "df['col'].mean()",
    "   A    B\n0  1  4.5\n1  2  NaN",
    "array([0.1, 0.2, 0.3])",
    "Out[3]: 42",
    "3.141592653589793",
    "<Figure size 640x480 with 1 Axes>",
    "<__main__.Foo object at 0x7f3a2c1d9e50>",
    "KeyError: 'price'",
    "Traceback (most recent call last):",
    "(1000, 12)",
    "True",
    "None",
    "dtype: float64",
    "Name: age, Length: 891",
    "!!!",
    "...",
    "=>",
    "{}",
    "#",
    "",
    "café",
    "naïve",
    "数据框",
    "Ünïcödé",
    "İstanbul",
    "\u212aelvin",
    "ß",
    "🙂 done",
    "\t",
    "\r\n",
    "\n\n",
    "  ",
    "x_1 = y__2",
    "CamelCaseName",
    "snake_case_name",
    "1e-10",
    "0xFF",
]


def _code_like(rng: random.Random, max_pieces: int = 12) -> str:
    """A random string glued from code/output fragments."""
    pieces = rng.choices(FRAGMENTS, k=rng.randint(0, max_pieces))
    return "".join(piece + rng.choice(["", " ", "\n", "\t", ", "]) for piece in pieces)


def _mutated(rng: random.Random, text: str) -> str:
    """The text with some words dropped, duplicated or swapped: a near miss."""
    words = text.split(" ")
    for _ in range(rng.randint(0, 4)):
        if not words:
            break
        i = rng.randrange(len(words))
        action = rng.choice(["drop", "dup", "swap", "case"])
        if action == "drop":
            del words[i]
        elif action == "dup":
            words.insert(i, words[i])
        elif action == "swap":
            j = rng.randrange(len(words))
            words[i], words[j] = words[j], words[i]
        else:
            words[i] = words[i].upper()
    return " ".join(words)


def _generated_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """Seeded (prediction, reference) pairs: unrelated, near misses and identical."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        ref = _code_like(rng)
        kind = rng.random()
        pred = _code_like(rng) if kind < 0.4 else ref if kind < 0.5 else _mutated(rng, ref)
        pairs.append((pred, ref))
    return pairs


EDGE_CASES = [
    ("", ""),
    ("", "x = 1"),
    ("x = 1", ""),
    ("!!!", "???"),
    ("...", "..."),
    ("   ", "\n\t"),
    ("café naïve", "cafe naive"),
    ("İstanbul", "istanbul"),
    ("\u212a", "k"),  # the Kelvin sign lowercases to an ASCII k
    ("数据框 df", "df 数据框"),
    ("🙂", "🙂"),
    ("a a a a", "a"),
    ("The The the", "the THE"),
    ("x" * 5000, "x" * 5000),
    (" ".join(f"tok{i % 97}" for i in range(800)), " ".join(f"tok{i % 89}" for i in range(900))),
]


def _reference_rouge_l(pred: str, ref: str) -> float:
    return ROUGE.score(ref, pred)["rougeL"].fmeasure


@pytest.mark.parametrize("pred, ref", EDGE_CASES + _generated_pairs(400, seed=11))
def test_rouge_l_equals_rouge_score(pred: str, ref: str) -> None:
    assert rouge_l(pred, ref) == pytest.approx(_reference_rouge_l(pred, ref), abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80) | st.sampled_from([ref for _, ref in EDGE_CASES]))
def test_rouge_tokens_equal_rouge_score_tokenizer(text: str) -> None:
    assert [token.decode("ascii") for token in rouge_tokens(text)] == rouge_score_tokenize(text, None)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.text(max_size=60))
def test_rouge_l_equals_rouge_score_on_arbitrary_unicode(pred: str, ref: str) -> None:
    assert rouge_l(pred, ref) == pytest.approx(_reference_rouge_l(pred, ref), abs=1e-9)


SMALL_VOCABULARY = st.sampled_from(["a", "b", "c", "x1", "Y2", "_", " ", "\n", ".", "é"])


@settings(max_examples=150, deadline=None)
@given(st.lists(SMALL_VOCABULARY, max_size=40), st.lists(SMALL_VOCABULARY, max_size=40))
def test_rouge_l_equals_rouge_score_on_small_vocabularies(pred: list[str], ref: list[str]) -> None:
    # Few distinct tokens make long, ambiguous common subsequences.
    pred_text, ref_text = "".join(pred), "".join(ref)
    assert rouge_l(pred_text, ref_text) == pytest.approx(_reference_rouge_l(pred_text, ref_text), abs=1e-9)


def test_rouge_l_on_very_long_texts() -> None:
    # Too long for rouge_score's quadratic Python table; the F1 follows from LCS lengths.
    text = " ".join(f"w{i}" for i in range(100_000))
    assert rouge_l(text, text) == 1.0
    assert rouge_l(text, text + " " + text) == pytest.approx(2 / 3, abs=1e-12)


@pytest.mark.parametrize("pred, ref", EDGE_CASES + _generated_pairs(300, seed=12))
def test_chrf_equals_sacrebleu_on_a_0_to_1_scale(pred: str, ref: str) -> None:
    expected = CHRF_REFERENCE.sentence_score(pred, [ref]).score / 100
    assert chrf(pred, ref) == pytest.approx(expected, abs=1e-9)
    assert 0.0 <= chrf(pred, ref) <= 1.0


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_chrf_equals_sacrebleu_on_arbitrary_unicode(pred: str, ref: str) -> None:
    expected = CHRF_REFERENCE.sentence_score(pred, [ref]).score / 100
    assert chrf(pred, ref) == pytest.approx(expected, abs=1e-9)


def test_both_empty_scores() -> None:
    assert score_sample("", "") == {
        "exact_match": 1.0,
        "exact_match_norm": 1.0,
        "rougeL": 0.0,
        "chrf": 0.0,
    }


def test_exact_match_is_strict() -> None:
    assert exact_match("42", "42") == 1.0
    assert exact_match("42\n", "42") == 0.0
    assert exact_match(" 42", "42") == 0.0
    assert exact_match("a\r\nb", "a\nb") == 0.0


@pytest.mark.parametrize(
    "pred, ref",
    [
        ("42\n", "42"),
        ("\n  42  \n\n", "42"),
        ("a\r\nb\rc", "a\nb\nc"),
        ("a   \nb\t\n", "a\nb"),
        ("   ", ""),
        ("<Foo object at 0x7f3a2c1d9e50>", "<Foo object at 0x55d1c0ffee00>"),
        ("[<A at 0xABC>, <A at 0x1>]", "[<A at 0xdef>, <A at 0x22>]"),
    ],
)
def test_exact_match_norm_ignores_outer_and_trailing_whitespace_and_addresses(pred: str, ref: str) -> None:
    assert exact_match(pred, ref) == 0.0
    assert exact_match_norm(pred, ref) == 1.0


@pytest.mark.parametrize(
    "pred, ref",
    [
        ("   A  B", "A B"),  # indentation and alignment inside a line are kept
        ("a\n\nb", "a\nb"),  # inner blank lines are kept
        ("<Foo object at 0x7f>", "<Bar object at 0x7f>"),
        ("x = 0x", "x = 0"),
        ("Foo", "foo"),
    ],
)
def test_exact_match_norm_keeps_meaningful_differences(pred: str, ref: str) -> None:
    assert exact_match_norm(pred, ref) == 0.0


def test_normalize_output_masks_every_address() -> None:
    assert normalize_output("  <f at 0x1f>\r\n[0xDEADbeef]  ") == "<f at 0x?>\n[0x?]"


@pytest.mark.parametrize("pred, ref", EDGE_CASES[:8] + _generated_pairs(20, seed=13))
def test_score_sample_combines_the_four_metrics(pred: str, ref: str) -> None:
    scores = score_sample(pred, ref)
    assert tuple(scores) == METRIC_NAMES
    assert scores == {
        "exact_match": exact_match(pred, ref),
        "exact_match_norm": exact_match_norm(pred, ref),
        "rougeL": rouge_l(pred, ref),
        "chrf": chrf(pred, ref),
    }


def test_rouge_score_is_not_needed_at_run_time() -> None:
    probe = (
        "import sys, themisto.evaluation.metrics as m; m.score_sample('a b', 'b'); print('rouge_score' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
