"""``themisto eval``: score a model (or a baseline) on the Themisto tasks with lm-eval.

    themisto eval --model hf --model-args pretrained=DIR --limit 50
    themisto eval --model themisto-repeat-last -o runs

Writes lm-eval's own layout, ``RUN_DIR/<model name>/results_<date>.json`` and
``samples_<task>_<date>.jsonl`` (``RUN_DIR`` is ``runs`` unless ``-o`` names
another), which ``themisto report RUN_DIR`` reads, and prints lm-eval's results
table.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from themisto.cli.options import add_data_argument
from themisto.exceptions import InputError
from themisto.vocabulary import BASELINES, BPB_GROUP, COMPRESSION_BASELINE, DEFAULT_SPLIT, LM_EVAL_GROUP, SPLITS

DEFAULT_RUN_DIR = "runs"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``eval`` subcommand."""
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a model or a baseline on the Themisto tasks through lm-evaluation-harness",
        description=(
            "Evaluate a model through lm-evaluation-harness on the Themisto tasks only "
            f"(the built-in lm-eval tasks are not indexed). Baselines: {', '.join(BASELINES)}; "
            f"likelihood control (tasks {BPB_GROUP}): {COMPRESSION_BASELINE}."
        ),
    )
    parser.add_argument(
        "--model", required=True, help="lm-eval model name: hf, vllm, local-chat-completions, themisto-empty, ..."
    )
    parser.add_argument(
        "--model-args", default="", metavar="ARGS", help="lm-eval model arguments, e.g. pretrained=DIR,dtype=float16"
    )
    parser.add_argument(
        "--tasks",
        default=LM_EVAL_GROUP,
        help=f"comma-separated task or group names (default: the group {LM_EVAL_GROUP}, all four tasks)",
    )
    parser.add_argument(
        "--limit",
        type=_limit,
        default=None,
        metavar="N",
        help=(
            "N examples per task (a fraction if < 1): a seeded sample spread over the trajectories in proportion"
            " to their rows, the same rows in every arm (not lm-eval's first N)"
        ),
    )
    parser.add_argument(
        "-o", "--output", default=DEFAULT_RUN_DIR, metavar="RUN_DIR",
        help=f"folder for results and samples, checked before anything runs (default: {DEFAULT_RUN_DIR})",
    )  # fmt: skip
    add_data_argument(parser, "built dataset folder or Hub id, e.g. ORG/themisto")
    parser.add_argument(
        "--split",
        default=DEFAULT_SPLIT,
        choices=SPLITS,
        help="test: the paper-style sample; full: every eligible example",
    )
    parser.add_argument(
        "--apply-chat-template",
        nargs="?",
        const=True,
        default=False,
        metavar="TEMPLATE",
        help="wrap prompts in the model's chat template (optionally a named one); for chat models",
    )
    parser.add_argument(
        "--gen-kwargs",
        default=None,
        metavar="KEY=VALUE,...",
        help="generation settings over the tasks' own, e.g. max_gen_toks=64 for a quick run (lm-eval's --gen_kwargs)",
    )
    parser.add_argument("--batch-size", default="1", help="batch size, or 'auto' (hf)")
    parser.add_argument(
        "--device", default=None, help="device for local models, e.g. cuda:0 or cpu (default: the GPU, else the CPU)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show lm-eval's log messages and its request-building bar"
    )
    parser.set_defaults(func=run)


def _limit(text: str) -> int | float:
    """``--limit``: a count of examples, or a fraction of each task below 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value if value < 1 else int(value)


def _batch_size(text: str) -> int | str:
    """``--batch-size``: a positive count, or lm-eval's ``auto`` / ``auto:N``."""
    if text == "auto" or text.startswith("auto:"):
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise InputError(f"--batch-size must be a positive integer or 'auto', got {text!r}")


def _gen_kwargs(text: str | None) -> dict[str, Any] | None:
    """``--gen-kwargs``: lm-eval's ``KEY=VALUE,...`` as a dict (values typed as lm-eval types them)."""
    if text is None:
        return None
    from lm_eval.utils import simple_parse_args_string

    pairs = [pair for pair in text.split(",") if pair.strip()]
    if not pairs or not all("=" in pair and pair.split("=", 1)[0].strip() for pair in pairs):
        raise InputError(f"--gen-kwargs {text!r} is not KEY=VALUE[,KEY=VALUE...], e.g. max_gen_toks=64")
    parsed: dict[str, Any] = simple_parse_args_string(text)
    return parsed


@contextmanager
def _request_bar_off(verbose: bool) -> Iterator[None]:
    """Silence the unlabelled bar lm-eval shows while it builds each task's requests, unless ``verbose``.

    It counts documents without saying so (``0/20``); the bars of the requests themselves stay.
    """
    import lm_eval.api.task

    original = lm_eval.api.task.tqdm
    if not verbose:
        lm_eval.api.task.tqdm = partial(original, disable=True)
    try:
        yield
    finally:
        lm_eval.api.task.tqdm = original


def run(args: argparse.Namespace) -> int:
    """Evaluate, write lm-eval's results and samples under ``--output``, print the results table."""
    from lm_eval.utils import make_table, setup_logging

    from themisto.cli.options import describe_data
    from themisto.evaluation.data import find_data
    from themisto.evaluation.harness import model_class, no_empty_folder_on_failure
    from themisto.filesystem import prepare_output_folder

    if args.verbose:
        setup_logging(logging.INFO)
    else:
        # lm-eval warns once per task about options Themisto sets on purpose;
        # keep the terminal to progress bars and the results.
        logging.getLogger("lm_eval").setLevel(logging.ERROR)
        import datasets

        datasets.disable_progress_bars()  # one "Generating split" bar per task and split
    tasks = [name.strip() for name in args.tasks.split(",") if name.strip()]
    batch_size, gen_kwargs = _batch_size(args.batch_size), _gen_kwargs(args.gen_kwargs)
    data = find_data(args.data)
    model_class(args.model)  # an unknown name is one line, before the status line
    output = Path(args.output)
    with no_empty_folder_on_failure(output):
        prepare_output_folder(output)
        print(
            f"themisto eval: {args.model} on {', '.join(tasks)}, {args.split} split of {describe_data(data)}",
            file=sys.stderr,
        )
        started = time.perf_counter()
        results = _evaluate(args, tasks, data.location, batch_size, gen_kwargs)
    if results is None:  # a non-zero rank of a multi-process run: rank 0 reports
        return 0
    print(make_table(results))
    if "groups" in results:
        print(make_table(results, "groups"))
    elapsed = time.perf_counter() - started
    print(f"themisto eval: done in {elapsed:.1f} s; results and samples in {args.output}", file=sys.stderr)
    return 0


def _evaluate(
    args: argparse.Namespace, tasks: list[str], data: str, batch_size: int | str, gen_kwargs: dict[str, Any] | None
) -> dict[str, Any] | None:
    """:func:`~themisto.evaluation.harness.evaluate` with the command's options; lm-eval's errors as one line."""
    from themisto.evaluation.harness import evaluate
    from themisto.exceptions import short_message

    try:
        with _request_bar_off(args.verbose):
            results = evaluate(
                args.model,
                args.model_args,
                tasks=tasks,
                limit=args.limit,
                output_path=args.output,
                data=data,
                split=args.split,
                batch_size=batch_size,
                device=args.device,
                apply_chat_template=args.apply_chat_template,
                gen_kwargs=gen_kwargs,
            )
    except (ValueError, OSError) as exc:
        # lm-eval reports an unknown model name or bad model arguments as
        # ValueError; transformers and vLLM report a missing checkpoint as OSError.
        raise InputError(f"{args.model}: {short_message(exc)}") from exc
    return results
