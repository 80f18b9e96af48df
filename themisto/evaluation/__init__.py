"""Stage 3, evaluation: score models on a build through lm-evaluation-harness.

In: a dataset folder or Hub id. Out: lm-eval result files and per-sample logs
(``samples_<task>_<date>.jsonl``), which :mod:`themisto.reporting` reads.

- :mod:`~themisto.evaluation.data`: where the build is found, how a config is loaded
- :mod:`~themisto.evaluation.harness`: :func:`evaluate` and the Themisto-only task manager
- :mod:`~themisto.evaluation.model_args`: model arguments checked before loading, the short name of a run
- :mod:`~themisto.evaluation.limit`: ``--limit`` as a seeded sample spread over the trajectories
- :mod:`~themisto.evaluation.baselines`: reference predictors registered as lm-eval models
- :mod:`~themisto.evaluation.metrics`: exact match, ROUGE-L, chrF per sample
- :mod:`~themisto.evaluation.answers`: answer post-processing (fenced code blocks)
- :mod:`~themisto.evaluation.exec`: ``exec-score``, next-cell predictions run in the recorded state
- :mod:`~themisto.evaluation.state_lookup`: the positive control's reading of a runtime block
- :mod:`~themisto.evaluation.compression`: the likelihood control, a compressor's conditional code length
- :mod:`~themisto.evaluation.shared_prefix`: lm-eval's ``hf`` model walking shared prompt prefixes once
- :mod:`~themisto.evaluation.local_models`: where the real models' GGUF files lie, their export for vLLM
"""

from themisto.evaluation.harness import evaluate, scores, task_manager

__all__ = ["evaluate", "scores", "task_manager"]
