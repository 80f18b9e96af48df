"""Run the Themisto tasks through lm-evaluation-harness from Python.

Model trainers call :func:`evaluate` inside a training loop (or hand
:func:`task_manager` to ``lm_eval.simple_evaluate`` themselves)::

    from themisto.evaluation import evaluate
    results = evaluate("hf", {"pretrained": "checkpoints/step-1000"}, limit=50,
                       output_path="runs/step-1000")
    results["results"]["themisto_output"]["exact_match,answer"]  # "answer": the tasks' filter

The data is found as :mod:`themisto.evaluation.data` says.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from themisto.evaluation.data import check_split, data_location, tasks_path
from themisto.evaluation.model_args import check_model_args, short_model_name
from themisto.exceptions import InputError, short_message
from themisto.filesystem import prepare_output_folder
from themisto.vocabulary import (
    ANSWER_FILTER,
    BASELINES,
    BPB_GROUP,
    BPB_SUFFIX,
    BPB_TASKS,
    COMPRESSION_BASELINE,
    DATA_KEY,
    DEFAULT_SPLIT,
    GROUP_TASKS,
    LM_EVAL_GROUP,
    LM_EVAL_TASKS,
    PLACEBO_SUFFIX,
    RUN_KEY,
    SHARED_PREFIX_MODEL,
    SPLIT_KEY,
    TASK_PAIRS,
)

if TYPE_CHECKING:
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager


class TrainableModel(Protocol):
    """A model object with a train/eval mode, such as a torch module (a transformers model)."""

    training: bool

    def train(self, mode: bool = True) -> Any: ...


def task_manager(data: str | None = None, split: str = DEFAULT_SPLIT) -> TaskManager:
    """An lm-eval TaskManager holding only the Themisto group and tasks.

    The 14,000 built-in tasks are not indexed (``include_defaults=False``), so
    construction takes milliseconds; ``data`` and ``split`` are resolved now,
    so a missing dataset fails here rather than mid-evaluation.
    """
    from lm_eval.tasks import TaskManager

    check_split(split)
    metadata = {DATA_KEY: data_location(data), SPLIT_KEY: split}
    return TaskManager(include_path=str(tasks_path()), include_defaults=False, metadata=metadata)


def limit_samples(tasks: Sequence[str], limit: int | float, data: str | None, split: str) -> dict[str, list[int]]:
    """lm-eval's ``samples`` for a ``limit``: per task (groups expanded), the rows of a sample spread over the
    trajectories (:func:`~themisto.evaluation.limit.spread_sample`), the same for every arm of a task."""
    from themisto.evaluation.data import load_task_dataset
    from themisto.evaluation.limit import spread_sample

    members = {LM_EVAL_GROUP: list(GROUP_TASKS), BPB_GROUP: list(BPB_TASKS)}
    names = [task for name in tasks for task in members.get(name, [name])]
    return {
        name: spread_sample(load_task_dataset(LM_EVAL_TASKS[name], data, split)["test"]["trajectory_id"], limit)
        for name in dict.fromkeys(names)
    }


def evaluate(
    model: str | LM | TrainableModel,
    model_args: str | dict[str, Any] | None = None,
    tasks: Sequence[str] = (LM_EVAL_GROUP,),
    limit: int | float | None = None,
    output_path: str | os.PathLike[str] | None = None,
    *,
    data: str | None = None,
    split: str = DEFAULT_SPLIT,
    tokenizer: Any = None,
    shared_prefix: bool = False,
    name: str | None = None,
    **kwargs: Any,
) -> dict[str, Any] | None:
    """Evaluate ``model`` on Themisto tasks with ``lm_eval.simple_evaluate``; return its results.

    ``model`` is an lm-eval model name (``hf``, ``vllm``, ``themisto-empty``,
    ...), an ``lm_eval.api.model.LM`` instance, or a transformers model object
    (the model being trained), which is wrapped in lm-eval's ``HFLM`` with
    ``tokenizer`` (in :class:`~themisto.evaluation.shared_prefix.SharedPrefixHFLM` with
    ``shared_prefix``: the arms of an example share one pass of their history) and put
    back in the train or eval mode it was in. Samples are
    always logged; with ``output_path`` the results JSON and one
    ``samples_<task>_<date>.jsonl`` per task are written in lm-eval's own layout
    (``output_path/<model name>/``, the name from ``gguf_file=``, ``pretrained=`` or ``model=``, else
    the registered name, else the checkpoint folder a model object was loaded from),
    which ``themisto report`` reads. ``name`` overrides the short name the run is filed and reported under
    (:func:`~themisto.evaluation.model_args.short_model_name`: ``SmolLM2-135M`` for
    ``pretrained=HuggingFaceTB/SmolLM2-135M``); the results JSON keeps the full model arguments.
    ``output_path`` is created and proved
    writable before anything is evaluated. ``limit`` (a count, or a fraction below 1) scores a seeded
    sample spread over the trajectories (:mod:`themisto.evaluation.limit`), not lm-eval's first rows;
    the results' ``samples`` entry names the rows each task scored. An ``hf`` model runs on the CPU when
    there is no CUDA device and neither ``device`` nor the model arguments name one.
    ``kwargs`` go to ``simple_evaluate`` (``batch_size``,
    ``apply_chat_template``, ``gen_kwargs``, ...). Returns None on the
    non-zero ranks of a multi-process run, as ``simple_evaluate`` does.
    :func:`themisto.integrations.scores` flattens the results.
    """
    import lm_eval
    from lm_eval.loggers import EvaluationTracker

    if isinstance(model, str):
        check_model(model, model_args, kwargs.get("device"))
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    manager = task_manager(data, split)
    unknown = [name for name in tasks if name not in manager.all_tasks]
    if unknown:
        raise InputError(f"unknown task(s) {', '.join(unknown)} (choose from {', '.join(manager.all_tasks)})")
    samples = None if limit is None else limit_samples(tasks, limit, data, split)
    if isinstance(model, str) and kwargs.get("device") is None:
        kwargs["device"] = _default_device(model_class(model), model_args)
    output = Path(output_path) if output_path is not None else None
    with no_empty_folder_on_failure(output):
        if output is not None:
            prepare_output_folder(output)  # an unwritable folder fails now, not after the evaluation
        tracker = EvaluationTracker(output_path=str(output_path)) if output_path else None
        module = _torch_module(model)
        if shared_prefix and module is None:
            raise InputError(f"shared_prefix wraps a model object; name the model {SHARED_PREFIX_MODEL} instead")
        was_training = module.training if module is not None else False
        try:
            if module is not None:
                from lm_eval.models.huggingface import HFLM

                from themisto.evaluation.shared_prefix import SharedPrefixHFLM

                wrapper = SharedPrefixHFLM if shared_prefix else HFLM
                model = wrapper(pretrained=module, tokenizer=tokenizer, batch_size=kwargs.get("batch_size", 1))
            with _quiet_git():
                results = lm_eval.simple_evaluate(
                    model=model,
                    model_args=model_args,
                    tasks=tasks,
                    samples=samples,
                    task_manager=manager,
                    evaluation_tracker=tracker,
                    log_samples=True,
                    **kwargs,
                )
        except TypeError as exc:
            # a model argument the model's constructor does not take; any other TypeError is a bug
            if "unexpected keyword argument" not in str(exc):
                raise
            name = model if isinstance(model, str) else type(model).__name__
            raise InputError(f"{name}: a model argument is not accepted: {short_message(exc)}") from exc
        finally:
            if module is not None:
                module.train(was_training)  # HFLM switched it to eval mode
        if results is not None:
            run_name = name or short_model_name(model, model_args)
            results[RUN_KEY] = {"name": run_name, "model_args": _model_args_text(model, model_args)}
            if tracker is not None:
                _name_run(tracker, run_name)
                _save(tracker, results)
    return cast("dict[str, Any] | None", results)  # lm-eval is untyped


# What lm-eval calls the results of a task without filters (the likelihood tasks).
NO_FILTER = "none"
# (runtime task, the task it is compared with), generative and likelihood: plain, then placebo.
ARM_CONTRASTS = tuple(
    (runtime + kind, other + kind)
    for kind in ("", BPB_SUFFIX)
    for plain, runtime in TASK_PAIRS
    for other in (plain, plain + PLACEBO_SUFFIX)
)


def scores(results: dict[str, Any], prefix: str = "themisto") -> dict[str, float]:
    """lm-eval results as flat numbers, for a trainer's loggers or a dashboard.

    ``<prefix>/<task>/<metric>`` holds each task's mean (``themisto/themisto_output/exact_match``,
    ``themisto/themisto_output_bpb/bits_per_byte``); ``<prefix>/delta/<task>/<metric>`` the runtime
    task's value minus its pair's without runtime (``themisto/delta/themisto_output/exact_match``,
    ``themisto/delta/themisto_output_bpb/bits_per_byte``), present when both tasks were run, and
    ``<prefix>/delta/<task>_placebo/<metric>`` the runtime task's minus the placebo task's
    (``themisto/delta/themisto_output_placebo_bpb/bits_per_byte``). With the same ``limit`` the arms
    of a task score the same examples, so these are paired differences. Standard errors and the
    group aggregates are left out.
    """
    flat: dict[str, float] = {}
    for task, values in results["results"].items():
        if task not in LM_EVAL_TASKS:
            continue
        for key, value in values.items():
            metric, _, filter_name = key.partition(",")
            # generative tasks are keyed by their answer filter, likelihood tasks by lm-eval's "none"
            kept = filter_name == (NO_FILTER if task in BPB_TASKS else ANSWER_FILTER)
            if kept and not metric.endswith("_stderr") and isinstance(value, (int, float)):
                flat[f"{prefix}/{task}/{metric}"] = float(value)
    for runtime, other in ARM_CONTRASTS:
        for key in [key for key in flat if key.startswith(f"{prefix}/{runtime}/")]:
            metric = key.rsplit("/", 1)[1]
            without = flat.get(f"{prefix}/{other}/{metric}")
            if without is not None:
                flat[f"{prefix}/delta/{other}/{metric}"] = flat[key] - without
    return flat


def register_models(name: str) -> None:
    """Register Themisto's lm-eval models: the baselines, the likelihood control, and the shared-prefix ``hf``
    model when ``name`` is that one (it imports torch, which no other Themisto model needs)."""
    import themisto.evaluation.baselines  # noqa: F401  registers the baseline models by name
    import themisto.evaluation.compression  # noqa: F401  registers the likelihood control

    if name == SHARED_PREFIX_MODEL:
        import themisto.evaluation.shared_prefix  # noqa: F401


def check_model(name: str, model_args: str | dict[str, Any] | None, device: str | None = None) -> type:
    """The model class registered as ``name``, its arguments checked as far as they can be before it loads.

    A ``device`` for a baseline is refused: it runs on no device, and ignoring the option would hide a
    mistaken ``--model``.
    """
    cls = model_class(name)
    if device is not None and name in (*BASELINES, COMPRESSION_BASELINE):
        raise InputError(f"{name} is a baseline and runs on no device: leave out device={device}")
    check_model_args(model_args, loads_weights=_loads_weights(cls))
    return cls


def _loads_weights(cls: type) -> bool:
    """Whether lm-eval's model class loads ``pretrained=`` weights with transformers (hf, the shared-prefix
    model, vLLM), rather than calling a server or being a baseline."""
    return cls.__module__.startswith(
        ("lm_eval.models.huggingface", "lm_eval.models.vllm", "themisto.evaluation.shared_prefix")
    )


def model_class(name: str) -> type:
    """The lm-eval model class registered as ``name``; an unknown name lists the Themisto baselines first."""
    from difflib import get_close_matches

    from lm_eval.api.registry import get_model, model_registry

    register_models(name)
    try:
        return cast(type, get_model(name))
    except ImportError as exc:  # registered, but its module needs a package this installation lacks
        extra = "themisto[vllm]" if exc.name == "vllm" else "the package lm-eval names for this model"
        raise InputError(
            f"model {name!r} needs {exc.name or 'a package'}, which is not installed (pip install {extra})"
        ) from None
    except ValueError:
        others = sorted(set(model_registry.keys()) - set(BASELINES))
        close = get_close_matches(name, [*BASELINES, *others], n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise InputError(
            f"unknown model {name!r}: {hint}Themisto baselines: {', '.join(BASELINES)}; "
            f"lm-eval models: {', '.join(others)}"
        ) from None


def _default_device(model_class: type, model_args: str | dict[str, Any] | None) -> str | None:
    """``cpu`` for a transformers model (HFLM) on a machine without CUDA, unless the arguments name a device.

    lm-eval drops a ``device`` of None, so HFLM keeps its own default, ``cuda``, and fails on a CPU
    machine; any other model keeps its default (None).
    """
    from lm_eval.utils import simple_parse_args_string

    # a subclass of HFLM has imported lm-eval's huggingface module; nothing else needs it here
    huggingface = sys.modules.get("lm_eval.models.huggingface")
    if huggingface is None or not issubclass(model_class, huggingface.HFLM):
        return None
    arguments = simple_parse_args_string(model_args) if isinstance(model_args, str) else (model_args or {})
    if "device" in arguments:
        return None
    torch = sys.modules["torch"]  # lm-eval's huggingface module imported it; the package itself needs no torch
    return None if torch.cuda.is_available() else "cpu"


def _torch_module(model: object) -> TrainableModel | None:
    """``model`` when it is a torch module (a transformers model object), else None."""
    # torch is optional: a model object of it exists only once something has imported it
    torch = sys.modules.get("torch")
    return model if torch is not None and isinstance(model, torch.nn.Module) else None


@contextmanager
def no_empty_folder_on_failure(folder: Path | None) -> Iterator[None]:
    """Remove ``folder`` again when the body fails, if it did not exist before and nothing was written there."""
    made = folder is not None and not folder.exists()
    try:
        yield
    except BaseException:
        if made and folder is not None:
            with suppress(OSError):  # not empty, or gone: leave it as it is
                folder.rmdir()
        raise


@contextmanager
def quiet_lm_eval() -> Iterator[None]:
    """Hold back lm-eval's warnings while the body runs (its errors still show).

    lm-eval warns at every evaluation about what Themisto does on purpose (a model object passed as
    ``pretrained``: "Many other model arguments may be ignored"); in a training log, once per
    evaluation, such lines bury the trainer's own.
    """
    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _quiet_git() -> Iterator[None]:
    """Let lm-eval record the git hash of the working directory without git printing to the terminal.

    lm-eval runs ``git describe`` with the terminal as its stderr, so outside a repository every
    evaluation printed "fatal: not a git repository". The same lookup, with git's stderr captured,
    stands in for it while ``simple_evaluate`` runs.
    """
    import lm_eval.evaluator

    original = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = _git_commit_hash
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = original


def _git_commit_hash() -> str | None:
    """``git describe --always`` in the working directory, else the hash of its ``.git`` folder, else None."""
    import subprocess

    from lm_eval.loggers.utils import get_commit_from_path

    try:
        done = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, check=True)
    except (subprocess.CalledProcessError, OSError):
        return cast("str | None", get_commit_from_path(os.getcwd()))
    return done.stdout.strip()


def _name_run(tracker: Any, name: str) -> None:
    """File the run under the model's short name (lm-eval would take ``pretrained=`` whole, or a random id)."""
    from lm_eval.utils import sanitize_model_name

    config = tracker.general_config_tracker
    config.model_name = name
    config.model_name_sanitized = sanitize_model_name(name)


def _model_args_text(model: str | LM | TrainableModel, model_args: str | dict[str, Any] | None) -> str:
    """The model's full arguments as given, for the run's metadata; a model object's checkpoint path."""
    if model_args:
        return model_args if isinstance(model_args, str) else ",".join(f"{k}={v}" for k, v in model_args.items())
    inner = getattr(model, "model", model)
    path = getattr(inner, "name_or_path", None)
    return f"pretrained={path}" if path else ""


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
