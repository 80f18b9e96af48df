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
trainer reports to (TensorBoard, W&B, ...). The callback holds the trainer, as
callbacks that log do (a callback is not otherwise given it). This module imports transformers; :func:`scores` alone needs only lm-eval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from themisto.evaluation.harness import evaluate, quiet_lm_eval, scores
from themisto.exceptions import InputError
from themisto.vocabulary import LM_EVAL_GROUP

__all__ = ["ThemistoCallback", "scores"]


class ThemistoCallback(TrainerCallback):
    """Run Themisto tasks on the model being trained at the trainer's evaluations and log the scores.

    ``tasks``: lm-eval task or group names (default: all four); ``limit``: examples per task (a seeded
    sample spread over the trajectories, :mod:`themisto.evaluation.limit`; the same rows for every arm of a
    task, so the logged delta is paired); ``split``:
    ``test`` or ``full``; ``every_n_evals``: run at the n-th, 2n-th, ... evaluation. ``data`` and
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
        self.trainer.log(dict(self.last_scores))
