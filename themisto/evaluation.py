"""Run the Themisto tasks through lm-evaluation-harness from Python.

Model trainers call :func:`evaluate` inside a training loop (or hand
:func:`task_manager` to ``lm_eval.simple_evaluate`` themselves)::

    from themisto.evaluation import evaluate
    results = evaluate("hf", {"pretrained": "checkpoints/step-1000"}, limit=50,
                       output_path="runs/step-1000")
    results["results"]["themisto_output"]["exact_match,answer"]  # "answer": the tasks' filter

Data location, in order of precedence: the ``data`` argument, the
``THEMISTO_DATA`` environment variable (a built dataset folder or a Hub id),
then the default build that ships with the package (``hf_dataset/`` next to
the package in a checkout, ``themisto/hf_dataset/`` in an installed wheel).
The task files are found the same way, so nothing depends on the cwd.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto.exceptions import InputError

if TYPE_CHECKING:
    import datasets
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

DATA_ENV = "THEMISTO_DATA"
# TaskManager metadata keys: lm-eval passes a task's metadata to its
# ``custom_dataset`` loader as keywords, which is how the data choice reaches
# utils.py; they are the parameter names of load_task_dataset.
DATA_KEY = "themisto_data"
SPLIT_KEY = "themisto_split"
SPLITS = ("test", "full")
GROUP = "themisto"
TASKS = {
    "themisto_output": "output_prediction",
    "themisto_output_runtime": "output_prediction_runtime",
    "themisto_next_cell": "next_cell_prediction",
    "themisto_next_cell_runtime": "next_cell_prediction_runtime",
}

_PACKAGE_DIR = Path(__file__).resolve().parent
# An opening Markdown fence at the very start of an answer (backticks and an
# optional info string such as "python"), possibly after one short lead-in
# line ending in a colon ("Output:", "Here is the code:").
_OPENING_FENCE = re.compile(r"\s*(?:[^`\n]{0,80}:[ \t]*\n\s*)?(`{3,})[^`\n]*\n")


def bundled_path(name: str) -> Path:
    """A top-level resource folder (``lm_eval_tasks``, ``hf_dataset``) of this installation.

    A wheel carries it inside the package (see setup.py); a source checkout or
    an editable install keeps it at the repository root, next to the package.
    """
    inside = _PACKAGE_DIR / name
    return inside if inside.is_dir() else _PACKAGE_DIR.parent / name


def tasks_path() -> Path:
    """The folder holding the Themisto lm-eval task YAMLs (pass it to ``--include_path``)."""
    return bundled_path("lm_eval_tasks") / "themisto"


def data_location(data: str | None = None) -> str:
    """The dataset to evaluate on: ``data``, else ``$THEMISTO_DATA``, else the bundled build."""
    chosen = data or os.environ.get(DATA_ENV) or str(bundled_path("hf_dataset"))
    path = Path(chosen).expanduser()
    if path.exists():
        if not (path / "README.md").is_file():
            raise InputError(f"{chosen}: not a built Themisto dataset (no README.md dataset card)")
        return str(path.resolve())
    if _looks_like_hub_id(chosen):
        return chosen
    raise InputError(f"{chosen}: dataset folder not found (set {DATA_ENV} or pass --data)")


def _looks_like_hub_id(name: str) -> bool:
    """``org/name`` with no further path parts: what ``load_dataset`` resolves on the Hub."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~"))


def _check_split(split: str) -> None:
    """Reject a split the dataset contract does not define."""
    if split not in SPLITS:
        raise InputError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")


def load_task_dataset(
    themisto_config: str,
    themisto_data: str | None = None,
    themisto_split: str = "test",
    **_metadata: Any,
) -> dict[str, datasets.Dataset]:
    """The ``custom_dataset`` loader of the task YAMLs: one config, exposed as lm-eval's ``test`` split.

    ``_metadata`` swallows the rest of the task metadata lm-eval passes along
    (``version``, model arguments); ``themisto_split`` lets ``full`` (every
    eligible example) stand in for the 200-example ``test`` sample.
    """
    import datasets

    _check_split(themisto_split)
    location = data_location(themisto_data)
    try:
        dataset = datasets.load_dataset(location, themisto_config, split=themisto_split)
    except (ValueError, OSError) as exc:  # OSError: missing files, or the Hub unreachable
        raise InputError(f"{location}: cannot load config {themisto_config!r}: {short_message(exc)}") from exc
    if len(dataset) == 0:
        raise InputError(f"{location}: config {themisto_config!r} split {themisto_split!r} is empty")
    return {"test": dataset}


def unfence(answer: str) -> str:
    """The body of ``answer`` when it starts with a fenced code block, else ``answer`` unchanged.

    Chat models wrap outputs and code in ```` ```python ... ``` ```` even when
    asked for the bare text, and models imitating the prompt's history write
    ``Output:`` and a fence; one lead-in line ending in a colon is therefore
    allowed before the block. The body runs to the closing fence (a line of
    at least as many backticks) or, when generation stopped inside the
    block, to the end; text after the block is commentary and dropped.
    """
    opening = _OPENING_FENCE.match(answer)
    if opening is None:
        return answer
    body = answer[opening.end() :]
    closing = re.search(rf"^ *{opening.group(1)}`*[ \t]*$", body, flags=re.MULTILINE)
    return body[: closing.start()] if closing else body


def short_message(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, cut to ``limit`` characters for a one-line error."""
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"


def task_manager(data: str | None = None, split: str = "test") -> TaskManager:
    """An lm-eval TaskManager holding only the Themisto group and tasks.

    The 14,000 built-in tasks are not indexed (``include_defaults=False``), so
    construction takes milliseconds; ``data`` and ``split`` are resolved now,
    so a missing dataset fails here rather than mid-evaluation.
    """
    from lm_eval.tasks import TaskManager

    _check_split(split)
    metadata = {DATA_KEY: data_location(data), SPLIT_KEY: split}
    return TaskManager(include_path=str(tasks_path()), include_defaults=False, metadata=metadata)


def evaluate(
    model: str | LM,
    model_args: str | dict[str, Any] | None = None,
    tasks: Sequence[str] = (GROUP,),
    limit: int | float | None = None,
    output_path: str | os.PathLike[str] | None = None,
    *,
    data: str | None = None,
    split: str = "test",
    **kwargs: Any,
) -> dict[str, Any] | None:
    """Evaluate ``model`` on Themisto tasks with ``lm_eval.simple_evaluate``; return its results.

    ``model`` is an lm-eval model name (``hf``, ``vllm``, ``themisto-empty``,
    ...) or an ``lm_eval.api.model.LM`` instance (e.g. ``HFLM(pretrained=model)``
    wrapping the model being trained). Samples are always logged; with
    ``output_path`` the results JSON and one ``samples_<task>_<date>.jsonl``
    per task are written in lm-eval's own layout
    (``output_path/<model name>/``), which ``themisto report`` reads.
    ``kwargs`` go to ``simple_evaluate`` (``batch_size``,
    ``apply_chat_template``, ``gen_kwargs``, ...). Returns None on the
    non-zero ranks of a multi-process run, as ``simple_evaluate`` does.
    """
    import lm_eval
    from lm_eval.loggers import EvaluationTracker

    import themisto.baselines  # noqa: F401  registers the baseline models by name

    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    manager = task_manager(data, split)
    unknown = [name for name in tasks if name not in manager.all_tasks]
    if unknown:
        raise InputError(
            f"unknown task(s) {', '.join(unknown)} (choose from {', '.join(manager.all_tasks)})"
        )
    tracker = EvaluationTracker(output_path=str(output_path)) if output_path else None
    results = lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=tasks,
        limit=limit,
        task_manager=manager,
        evaluation_tracker=tracker,
        log_samples=True,
        **kwargs,
    )
    if results is not None and tracker is not None:
        _name_run(tracker, model, model_args)
        _save(tracker, results)
    return results


def _name_run(tracker: Any, model: str | LM, model_args: str | dict[str, Any] | None) -> None:
    """Name the results folder after the model when its arguments do not name it.

    lm-eval takes the name from ``pretrained=``/``model=``-like arguments and
    falls back to a random id, which would make baseline runs unrecognisable.
    """
    from lm_eval.utils import sanitize_model_name

    config = tracker.general_config_tracker
    if config._get_model_name(model_args) is None:
        config.model_name = model if isinstance(model, str) else type(model).__name__
        config.model_name_sanitized = sanitize_model_name(config.model_name)


def _save(tracker: Any, results: dict[str, Any]) -> None:
    """Write results and per-task samples, failing loudly where lm-eval would only log a warning."""
    output = Path(tracker.output_path)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{output}: cannot create the output folder: {exc.strerror}") from exc
    samples = results["samples"]
    tracker.save_results_aggregated(results=results, samples=samples)
    for task_name in results["configs"]:
        tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    run_dir = output / tracker.general_config_tracker.model_name_sanitized
    date_id = getattr(tracker, "date_id", None)  # unset when lm-eval failed before naming the file
    if date_id is None or not (run_dir / f"results_{date_id}.json").is_file():
        raise InputError(f"{run_dir}: lm-eval could not write the results there")
