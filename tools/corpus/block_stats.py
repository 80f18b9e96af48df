"""What the runtime block of a build shows of the frames a target cell reads, and what the build's deviations touch.

    python -m tools.corpus.block_stats BUILD [--tokenizer-gguf PATH]

For the ``test`` split of ``output_prediction_runtime``: how many target cells read a DataFrame (a name of
the cell's code bound to a ``pandas.DataFrame`` in the state before it), how many of those frames show in
the block with every column and its dtype (the block's own description lists ``shape[1]`` columns, each
``label dtype``, and names no column it leaves out), how many show their repr cut, and the block's size
(characters, and tokens of the SmolLM2 tokenizer when ``--tokenizer-gguf`` names its GGUF file).
Then what the build's options touch: examples whose history was cut, the ids both tasks' test splits share,
and the prompts that carry the environment line. ``--compression`` adds the compression control: the bits
LZMA2 spends on each output target after its runtime prompt minus after its plain prompt, per target byte
(``themisto-compression``'s own code length): below zero where the block tells the
compressor something about the target; the mean with a 95% CI resampling whole trajectories.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
from pathlib import Path

import pyarrow.parquet as pq

from themisto.building.card_reading import read_data_files
from themisto.building.prompts import PROMPT_REPR_TRUNCATION_MARK, referenced_names, shown_variables
from themisto.evaluation.compression import conditional_bits  # the likelihood control's own code length
from themisto.trajectory import Variable

_COLUMNS = re.compile(r"columns \((\d+)\): (.*)")


def rows(build: Path, config: str, split: str = "test") -> list[dict]:
    """The rows of one split of one config of a build."""
    return pq.read_table(build / read_data_files(build)[config, split]).to_pylist()


def every_column_with_dtype(shown: Variable, columns: int) -> bool:
    """Whether a block's variable lists ``columns`` columns, each ``label dtype``, and leaves none out."""
    match = _COLUMNS.match((shown.description or "").split("\n")[0])
    if match is None or int(match[1]) != columns or ", ... " in match[2]:
        return False
    return len([pair for pair in match[2].split(", ") if " " in pair]) >= columns


def frames_read(row: dict) -> list[dict]:
    """The DataFrames of the state before the step that the target cell's code names."""
    names = referenced_names(row["code"])
    return [v for v in row["runtime"] if v["name"] in names and v["type"].endswith("DataFrame") and v["shape"]]


def compression_delta(build: Path, resamples: int = 2000) -> tuple[float, float, float, int, int]:
    """Mean runtime-minus-plain bits per target byte of the output test split, its trajectory-bootstrap CI,
    and how many examples the block makes cheaper and dearer."""
    plain = {row["example_id"]: row for row in rows(build, "output_prediction")}
    deltas: dict[str, list[float]] = {}
    for row in rows(build, "output_prediction_runtime"):
        size = max(len(row["target"].encode("utf-8")), 1)
        saved = conditional_bits(row["prompt"], row["target"]) - conditional_bits(
            plain[row["example_id"]]["prompt"], row["target"]
        )
        deltas.setdefault(row["trajectory_id"], []).append(saved / size)
    every = [delta for values in deltas.values() for delta in values]
    clusters = list(deltas.values())
    rng = random.Random(0)
    means = sorted(
        statistics.fmean([d for cluster in rng.choices(clusters, k=len(clusters)) for d in cluster])
        for _ in range(resamples)
    )
    low, high = means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]
    return statistics.fmean(every), low, high, sum(d < 0 for d in every), sum(d > 0 for d in every)


def frames_shown(output: list[dict]) -> tuple[list[dict], int, int, int]:
    """Of runtime output-prediction rows: those whose cell reads a DataFrame, how many of them show every
    column of every frame read with its dtype, how many frames they read, and how many of those the
    block shows with a cut repr (or not at all)."""
    reading = [row for row in output if frames_read(row)]
    frames = whole = cut = 0
    for row in reading:
        shown = {variable.name: variable for variable in shown_variables(row["runtime_text"])}
        described = True
        for frame in frames_read(row):
            frames += 1
            block = shown.get(frame["name"])
            cut += block is None or block.repr_truncated or block.repr.endswith(PROMPT_REPR_TRUNCATION_MARK)
            described &= block is not None and every_column_with_dtype(block, frame["shape"][1])
        whole += described
    return reading, whole, frames, cut


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", type=Path)
    parser.add_argument("--tokenizer-gguf", type=Path, help="a GGUF file whose tokenizer counts the block's tokens")
    parser.add_argument("--compression", action="store_true", help="also the compression control (see above)")
    args = parser.parse_args()
    output = rows(args.build, "output_prediction_runtime")
    reading, whole, frames, cut = frames_shown(output)
    print(f"output test examples: {len(output)}; reading a DataFrame: {len(reading)} ({frames} frames read)")
    print(
        f"  every column of every frame read shown with its dtype: {whole} of {len(reading)}"
        f" ({whole / max(len(reading), 1):.1%})"
    )
    print(f"  frames read whose repr the block cuts (or leaves out): {cut} of {frames}")
    blocks = [row["runtime_text"] for row in output]
    print(f"  runtime block: median {statistics.median(map(len, blocks)):.0f} characters")
    if args.tokenizer_gguf:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_gguf.parent, gguf_file=args.tokenizer_gguf.name)
        tokens = [len(tokenizer(text)["input_ids"]) for text in blocks]
        print(f"  runtime block: median {statistics.median(tokens):.0f} tokens (SmolLM2 tokenizer)")
    for task in ("output_prediction", "next_cell_prediction"):
        test = rows(args.build, task)
        dropped = sum(row["history_dropped"] > 0 for row in test)
        print(f"{task} test: history cut in {dropped} of {len(test)}; full split {len(rows(args.build, task, 'full'))}")
    shared = {r["example_id"] for r in output} & {r["example_id"] for r in rows(args.build, "next_cell_prediction")}
    print(f"test ids shared by both tasks: {len(shared)}")
    plain = rows(args.build, "output_prediction")
    with_line = sum(row["prompt"].split("\n\n")[1].startswith("The kernel ran Python") for row in plain + output)
    print(f"prompts (both arms, output test) opening with the environment line: {with_line} of {2 * len(output)}")
    if args.compression:
        mean, low, high, cheaper, dearer = compression_delta(args.build)
        print(
            f"compression control, output test: runtime - plain {mean:+.3f} bits/byte [{low:+.3f}, {high:+.3f}],"
            f" cheaper with the block {cheaper}, dearer {dearer}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
