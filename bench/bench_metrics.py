"""Metric throughput: our rougeL and chrf against rouge_score and sacrebleu, same pairs.

Both sides score the same seeded code/output-like pairs, interleaved over
several repetitions (median wall time), and must give the same values:
rougeL equal to ``RougeScorer(["rougeL"])`` F1 to 1e-9, chrf equal to
``CHRF().sentence_score(...).score / 100`` to 1e-9.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rouge_score.rouge_scorer import RougeScorer
from sacrebleu.metrics import CHRF

from themisto.evaluation.metrics import chrf, rouge_l

ROUGE_TARGET = 20.0
# chrf must be no slower than sacrebleu's per-sentence scoring.
CHRF_TARGET = 1.0

Pair = tuple[str, str]


def _dataframe_text(rng: random.Random) -> str:
    """A pandas-like printed table with random numbers."""
    columns = rng.sample(["age", "fare", "price", "count", "score", "id", "name"], 3)
    lines = ["    " + "  ".join(f"{c:>8}" for c in columns)]
    for row in range(rng.randint(2, 8)):
        lines.append(f"{row:<4}" + "  ".join(f"{rng.uniform(0, 999):8.2f}" for _ in columns))
    return "\n".join(lines)


def _code_text(rng: random.Random) -> str:
    """A few lines of notebook-style Python."""
    names = ["df", "model", "X_train", "y", "result", "counts", "fig"]
    templates = [
        "{a} = {b}.groupby('{c}').mean()",
        "print({a}.shape)",
        "{a}.head({n})",
        "for i in range({n}):\n    {a}[i] = {b}[i] * 2",
        "import numpy as np",
        "{a} = pd.read_csv('data/{c}.csv')",
        "plt.plot({a}, {b})\nplt.show()",
        "def f({a}):\n    return {a} ** {n}",
        "{a}.fit({b}, y)",
    ]
    lines = []
    for _ in range(rng.randint(1, 5)):
        template = rng.choice(templates)
        lines.append(
            template.format(
                a=rng.choice(names), b=rng.choice(names), c=rng.choice(["age", "city", "price"]), n=rng.randint(1, 99)
            )
        )
    return "\n".join(lines)


def _repr_text(rng: random.Random) -> str:
    """A short output: a number, an array, an object repr or an error line."""
    kind = rng.randrange(4)
    if kind == 0:
        return str(rng.uniform(-1e3, 1e3))
    if kind == 1:
        numbers = ", ".join(f"{rng.random():.3f}" for _ in range(rng.randint(1, 12)))
        return f"array([{numbers}])"
    if kind == 2:
        return f"<sklearn.linear_model.LinearRegression object at 0x{rng.getrandbits(48):x}>"
    return rng.choice(["KeyError: 'price'", "NameError: name 'df' is not defined", "(891, 12)"])


def _near_miss(rng: random.Random, text: str) -> str:
    """The text with a few characters or words changed, as a plausible model guess."""
    words = text.split(" ")
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(words))
        words[i] = rng.choice(["", words[i].upper(), words[i] + "0", "x"])
    return " ".join(words)


def generate_pairs(count: int, seed: int = 0) -> list[Pair]:
    """Seeded (prediction, reference) pairs like Themisto's outputs and cells."""
    rng = random.Random(seed)
    makers = [_dataframe_text, _code_text, _repr_text]
    pairs = []
    for _ in range(count):
        reference = rng.choice(makers)(rng)
        roll = rng.random()
        if roll < 0.1:
            prediction = reference
        elif roll < 0.7:
            prediction = _near_miss(rng, reference)
        else:
            prediction = rng.choice(makers)(rng)
        pairs.append((prediction, reference))
    return pairs


def _median_times(
    contenders: dict[str, Callable[[], list[float]]], repetitions: int
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Median wall time of each contender, run interleaved after one warm-up, and its values."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    values = {name: score_all() for name, score_all in contenders.items()}  # warm-up
    for _ in range(repetitions):
        for name, score_all in contenders.items():
            start = time.perf_counter()
            values[name] = score_all()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, values


def _assert_same(ours: list[float], reference: list[float], what: str) -> None:
    """Fail loudly when a fast path stops giving the reference's values."""
    worst = max(abs(a - b) for a, b in zip(ours, reference))
    if worst > 1e-9:
        raise AssertionError(f"{what}: values differ from the reference by up to {worst}")


def run(quick: bool = False) -> list[dict]:
    """Throughput ratios of rougeL and chrf over the same pairs, values checked equal."""
    pairs = generate_pairs(300 if quick else 2_000)
    repetitions = 5 if quick else 7
    rouge_scorer, chrf_scorer = RougeScorer(["rougeL"]), CHRF()
    rouge_times, rouge_values = _median_times(
        {
            "ours": lambda: [rouge_l(p, r) for p, r in pairs],
            "rouge_score": lambda: [rouge_scorer.score(r, p)["rougeL"].fmeasure for p, r in pairs],
        },
        repetitions,
    )
    _assert_same(rouge_values["ours"], rouge_values["rouge_score"], "rougeL")
    chrf_times, chrf_values = _median_times(
        {
            "ours": lambda: [chrf(p, r) for p, r in pairs],
            "sacrebleu": lambda: [chrf_scorer.sentence_score(p, [r]).score / 100 for p, r in pairs],
        },
        repetitions,
    )
    _assert_same(chrf_values["ours"], chrf_values["sacrebleu"], "chrf")
    rouge_ratio = rouge_times["rouge_score"] / rouge_times["ours"]
    chrf_ratio = chrf_times["sacrebleu"] / chrf_times["ours"]
    return [
        {
            "benchmark": "metrics",
            "measure": f"rougeL throughput, ours / rouge_score ({len(pairs)} pairs, equal values)",
            "target": f">= {ROUGE_TARGET:g}x",
            "value": f"{rouge_ratio:.1f}x ({rouge_times['ours'] * 1e3:.1f} ms vs "
            f"{rouge_times['rouge_score'] * 1e3:.1f} ms)",
            "passed": rouge_ratio >= ROUGE_TARGET,
        },
        {
            "benchmark": "metrics",
            "measure": f"chrf throughput, ours / sacrebleu sentence_score ({len(pairs)} pairs, equal values)",
            "target": f">= {CHRF_TARGET:g}x",
            "value": f"{chrf_ratio:.2f}x ({chrf_times['ours'] * 1e3:.1f} ms vs {chrf_times['sacrebleu'] * 1e3:.1f} ms)",
            "passed": chrf_ratio >= CHRF_TARGET,
        },
    ]


if __name__ == "__main__":
    from run_all import main  # bench/ is on sys.path when a benchmark runs as a script

    sys.exit(main([*sys.argv[1:], Path(__file__).stem]))
