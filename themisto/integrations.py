"""Themisto in a training loop: a transformers ``TrainerCallback`` and the flat ``scores`` of a run.

::

    from themisto.integrations import ThemistoCallback

    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val, processing_class=tokenizer)
    trainer.add_callback(ThemistoCallback(trainer, tasks=["themisto_bpb"], limit=50))
    trainer.train()

After every evaluation of the trainer (every ``every_n_evals``-th), the callback
scores the model being trained on the chosen Themisto tasks (here the likelihood
group ``themisto_bpb``: bits per byte of the gold target, a continuous score) and
logs ``themisto/<task>/<metric>`` and ``themisto/delta/<task>/<metric>`` (runtime
minus no runtime; runtime minus placebo under the placebo task's name, e.g.
``themisto/delta/themisto_output_placebo_bpb/bits_per_byte``) through
``trainer.log``, so they reach ``state.log_history`` and every logger the
trainer reports to (TensorBoard, W&B, ...). Given ``reference`` (the lm-eval results of
another model on the same tasks and examples, e.g. the base model's), it also logs
:func:`model_differences`: this model minus the reference, paired per example, with
a CI over whole trajectories, the sign-flip p and whether the benchmark ranks the two.
The callback holds the trainer, as callbacks that log do (a callback is not
otherwise given it). This module imports transformers; :func:`scores` alone needs only lm-eval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from themisto.evaluation.harness import evaluate, quiet_lm_eval, scores
from themisto.exceptions import InputError
from themisto.reporting.analysis import model_comparisons
from themisto.reporting.samples import TaskSamples, samples_of_records
from themisto.reporting.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from themisto.vocabulary import LM_EVAL_GROUP, LM_EVAL_TASKS

__all__ = ["ThemistoCallback", "model_differences", "scores"]


def _task_samples(results: dict[str, Any], model: str) -> list[TaskSamples]:
    """The per-sample scores of lm-eval results held in memory, as the report reads them from sample logs."""
    from lm_eval.utils import handle_non_serializable

    found = []
    for task, records in results.get("samples", {}).items():
        if task in LM_EVAL_TASKS:
            # the logged form: lm-eval writes each sample through this JSON conversion (tuples become lists)
            logged = json.loads(json.dumps(records, default=handle_non_serializable))
            found += samples_of_records(enumerate(logged, start=1), Path(f"<{model} results>"), model, task)
    return found


def model_differences(
    results: dict[str, Any],
    reference: dict[str, Any],
    name: str = "reference",
    prefix: str = "themisto",
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, float]:
    """This run's scores minus a reference run's on the examples both scored, as flat numbers.

    ``results`` and ``reference`` are what :func:`themisto.evaluation.evaluate` returns (samples
    logged). Per task and compared metric (bits per byte, ``exact_match_norm``, ``chrf``),
    ``<prefix>/vs/<name>/<task>/<metric>`` is the mean per-example difference (this − reference),
    ``.../low`` and ``.../high`` its 95% CI resampling whole trajectories (examples where the
    samples name none), ``.../p`` the sign-flip p, ``.../n`` the paired examples and
    ``.../ranks`` −1 where the benchmark ranks this model below the reference, +1 above, 0 where
    it does not separate them: the figures of ``themisto report``'s *Models compared*.
    """
    # Labels that sort the reference first, so each comparison's b − a is this run minus the reference.
    samples = _task_samples(reference, "0 reference") + _task_samples(results, "1 this")
    flat: dict[str, float] = {}
    for comparison in model_comparisons(samples, resamples, seed)[0]:
        figures, interval = comparison.figures, comparison.figures.quoted_difference
        key = f"{prefix}/vs/{name}/{comparison.task}/{figures.metric}"
        flat[key] = interval.estimate
        flat[f"{key}/low"], flat[f"{key}/high"] = interval.low, interval.high
        flat[f"{key}/p"] = figures.quoted_p_value
        flat[f"{key}/n"] = float(figures.n)
        flat[f"{key}/ranks"] = math.copysign(1.0, interval.estimate) if comparison.separated else 0.0
    return flat


class ThemistoCallback(TrainerCallback):
    """Run Themisto tasks on the model being trained at the trainer's evaluations and log the scores.

    ``tasks``: lm-eval task or group names (default: all four); ``limit``: examples per task (a seeded
    sample spread over the trajectories, :mod:`themisto.evaluation.limit`; the same rows for every arm of a
    task, so the logged delta is paired); ``split``:
    ``test`` or ``full``; ``every_n_evals``: run at the n-th, 2n-th, ... evaluation; ``reference``:
    another model's results on the same tasks (same ``limit``), whose :func:`model_differences`
    under ``reference_name`` are logged too. ``data`` and
    further keywords (``gen_kwargs``, ``batch_size``, ``output_path``, ...) go to
    :func:`themisto.evaluation.evaluate`. Only the main process evaluates; the model is left in the
    train or eval mode it was in.
    """

    def __init__(
        self,
        trainer: Any,
        tasks: Sequence[str] = (LM_EVAL_GROUP,),
        limit: int | float | None = None,
        split: str = "test",
        every_n_evals: int = 1,
        data: str | None = None,
        reference: dict[str, Any] | None = None,
        reference_name: str = "reference",
        **evaluate_kwargs: Any,
    ) -> None:
        if every_n_evals < 1:
            raise InputError(f"every_n_evals must be at least 1, got {every_n_evals}")
        self.trainer = trainer
        self.tasks = [tasks] if isinstance(tasks, str) else list(tasks)
        self.limit = limit
        self.split = split
        self.every_n_evals = every_n_evals
        self.data = data
        self.reference = reference
        self.reference_name = reference_name
        self.evaluate_kwargs = evaluate_kwargs
        self.evaluations = 0  # the trainer's evaluations seen so far
        self.last_scores: dict[str, float] = {}

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Score the model on the tasks and log the flat metrics, at every ``every_n_evals``-th evaluation."""
        self.evaluations += 1
        if self.evaluations % self.every_n_evals or not state.is_world_process_zero:
            return
        model = kwargs.get("model") or self.trainer.model
        with quiet_lm_eval():  # the training log gets the scores, not lm-eval's warnings about our settings
            results = evaluate(
                model,
                tasks=self.tasks,
                limit=self.limit,
                data=self.data,
                split=self.split,
                tokenizer=self.trainer.processing_class,
                **self.evaluate_kwargs,
            )
        if results is None:
            return
        self.last_scores = scores(results)
        if self.reference is not None:
            self.last_scores |= model_differences(results, self.reference, self.reference_name)
        self.trainer.log(dict(self.last_scores))
