"""Themisto: a benchmark of whether language models can use Jupyter runtime state.

The pipeline's stages, each a subpackage that imports only earlier ones:

- :mod:`~themisto.recording`: real kernels driven through notebooks and development logs, one trajectory each
- :mod:`~themisto.building`: trajectories become the dataset (Parquet configs and a dataset card)
- :mod:`~themisto.evaluation`: models scored through lm-evaluation-harness, and by executing their cells
- :mod:`~themisto.reporting`: per-sample scores become confidence intervals, paired tests and a plot
- :mod:`~themisto.kernel`: the live kernel the stages share: process, sandbox, snapshots, recorder, forking session
- :mod:`~themisto.cli`: the ``themisto`` command

Shared by every stage:

- :mod:`~themisto.trajectory`: the step schema, JSONL reading and writing, validation
- :mod:`~themisto.provenance`: how a trajectory was made, in the file beside it
- :mod:`~themisto.vocabulary`: the names the stages share (tasks, configs, splits, metrics)
- :mod:`~themisto.declaration`: options declared once, with their default, help, flag and check
- :mod:`~themisto.exceptions`: the errors bad input causes, shown as one line by the CLI
- :mod:`~themisto.filesystem`: output folders, locks, atomic writes and swaps
- :mod:`~themisto.jsonl`: JSON Lines reading
- :mod:`~themisto.notebook_code`: notebook code parsed for what it names, without the compiler's warnings about it
- :mod:`~themisto.lm_eval_files`: lm-eval's sample logs on disk, newest per task
- :mod:`~themisto.progress`: the progress hook of long work
- :mod:`~themisto.run_options`: ``--jobs`` and ``--shard`` of record and exec-score, and how a shard is chosen
- :mod:`~themisto.integrations`: a transformers ``TrainerCallback`` and the flat scores of a run
"""

__version__ = "0.1.0"  # the one declaration: setup.cfg reads it (attr:), provenance and --version print it
