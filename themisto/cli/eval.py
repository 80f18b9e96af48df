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
from dataclasses import MISSING, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

from themisto.cli.options import add_data_argument
from themisto.declaration import add_declared_arguments, check_declared, declared_values, option, positive
from themisto.exceptions import InputError
from themisto.vocabulary import BASELINES, BPB_GROUP, COMPRESSION_BASELINE, DEFAULT_SPLIT, LM_EVAL_GROUP, SPLITS

DEFAULT_RUN_DIR = "runs"


def _limit(text: str) -> int | float:
    """``--limit``: a count of examples, or a fraction of each task below 1."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"must be a number, got {text!r}") from None
    return value if value < 1 else int(value)


def _batch_size(text: str) -> int | str:
    """``--batch-size``: a positive count, or lm-eval's ``auto`` / ``auto:N``."""
    if text == "auto" or text.startswith("auto:"):
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise InputError(f"must be a positive integer or 'auto', got {text!r}")


def _gen_kwargs(text: str) -> dict[str, Any]:
    """``--gen-kwargs``: lm-eval's ``KEY=VALUE,...`` as a dict (values typed as lm-eval types them)."""
    from lm_eval.utils import simple_parse_args_string

    pairs = [pair for pair in text.split(",") if pair.strip()]
    if not pairs or not all("=" in pair and pair.split("=", 1)[0].strip() for pair in pairs):
        raise InputError(f"{text!r} is not KEY=VALUE[,KEY=VALUE...], e.g. max_gen_toks=64")
    parsed: dict[str, Any] = simple_parse_args_string(text)
    return parsed


@dataclass(frozen=True)
class EvalOptions:
    """What ``themisto eval`` runs, on what, and where it writes; each option declared once."""

    model: str = option(
        MISSING, "lm-eval model name: hf, vllm, local-chat-completions, themisto-empty, ...", metavar="MODEL"
    )
    model_args: str = option("", "lm-eval model arguments, e.g. pretrained=DIR,dtype=float16", metavar="ARGS")
    name: str | None = option(
        None,
        "the name the run is filed and reported under",
        metavar="NAME",
        default_text="from the model arguments",
    )
    tasks: str = option(
        LM_EVAL_GROUP,
        "comma-separated task or group names",
        metavar="TASKS",
        default_text=f"the group {LM_EVAL_GROUP}, all four tasks",
    )
    limit: int | float | None = option(
        None,
        "N examples per task (a fraction if < 1): a seeded sample spread over the trajectories in proportion"
        " to their rows, the same rows in every arm (not lm-eval's first N)",
        metavar="N",
        parse=_limit,
        check=positive,
    )
    output: str = option(
        DEFAULT_RUN_DIR,
        "folder for results and samples, checked before anything runs",
        short="-o",
        metavar="RUN_DIR",
    )
    split: str = option(DEFAULT_SPLIT, "test: the paper-style sample; full: every eligible example", choices=SPLITS)
    apply_chat_template: bool | str = option(
        False,
        "wrap prompts in the model's chat template (optionally a named one); for chat models",
        metavar="TEMPLATE",
        bare=True,
    )
    gen_kwargs: dict[str, Any] | None = option(
        None,
        "generation settings over the tasks' own, e.g. max_gen_toks=64 for a quick run (lm-eval's --gen_kwargs)",
        metavar="KEY=VALUE,...",
        parse=_gen_kwargs,
    )
    batch_size: int | str = option(1, "batch size, or 'auto' (hf)", metavar="BATCH_SIZE", parse=_batch_size)
    device: str | None = option(
        None, "device for local models, e.g. cuda:0 or cpu", metavar="DEVICE", default_text="the GPU, else the CPU"
    )
    verbose: bool = option(False, "show lm-eval's log messages and its request-building bar", short="-v")

    def __post_init__(self) -> None:
        check_declared(self)


# The options before --data in the help, and after it.
_BEFORE_DATA = ("model", "model_args", "name", "tasks", "limit", "output")


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
    add_declared_arguments(parser, EvalOptions, _BEFORE_DATA)
    add_data_argument(parser, "built dataset folder or Hub id, e.g. ORG/themisto")
    add_declared_arguments(parser, EvalOptions, [f.name for f in fields(EvalOptions) if f.name not in _BEFORE_DATA])
    parser.set_defaults(func=run)


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
    from themisto.evaluation.harness import check_model, no_empty_folder_on_failure
    from themisto.filesystem import prepare_output_folder

    options = EvalOptions(**declared_values(args, EvalOptions))
    if options.verbose:
        setup_logging(logging.INFO)
    else:
        # lm-eval warns once per task about options Themisto sets on purpose;
        # keep the terminal to progress bars and the results.
        logging.getLogger("lm_eval").setLevel(logging.ERROR)
        import datasets

        datasets.disable_progress_bars()  # one "Generating split" bar per task and split
    tasks = [name.strip() for name in options.tasks.split(",") if name.strip()]
    data = find_data(args.data)
    check_model(
        options.model, options.model_args, options.device
    )  # bad model input is one line, before the status line
    output = Path(options.output)
    with no_empty_folder_on_failure(output):
        prepare_output_folder(output)
        print(
            f"themisto eval: {options.model} on {', '.join(tasks)}, {options.split} split of {describe_data(data)}",
            file=sys.stderr,
        )
        started = time.perf_counter()
        results = _evaluate(options, tasks, data.location)
    if results is None:  # a non-zero rank of a multi-process run: rank 0 reports
        return 0
    print(make_table(results))
    if "groups" in results:
        print(make_table(results, "groups"))
    elapsed = time.perf_counter() - started
    print(f"themisto eval: done in {elapsed:.1f} s; results and samples in {options.output}", file=sys.stderr)
    return 0


def _evaluate(options: EvalOptions, tasks: list[str], data: str) -> dict[str, Any] | None:
    """:func:`~themisto.evaluation.harness.evaluate` with the command's options; lm-eval's errors as one line."""
    from themisto.evaluation.harness import evaluate
    from themisto.exceptions import short_message

    try:
        with _request_bar_off(options.verbose):
            results = evaluate(
                options.model,
                options.model_args,
                tasks=tasks,
                limit=options.limit,
                output_path=options.output,
                data=data,
                split=options.split,
                batch_size=options.batch_size,
                device=options.device,
                apply_chat_template=options.apply_chat_template,
                gen_kwargs=options.gen_kwargs,
                name=options.name,
            )
    except (ValueError, OSError) as exc:
        # lm-eval reports an unknown model name or bad model arguments as
        # ValueError; transformers and vLLM report a missing checkpoint as OSError.
        raise InputError(f"{options.model}: {short_message(exc)}") from exc
    return results
