"""Stage 2, building: trajectories become the benchmark's dataset.

In: trajectory JSONL files. Out: a dataset folder (``hf_dataset/``) with one
Parquet file per config and split and a ``README.md`` dataset card, readable
by ``datasets.load_dataset(folder, config)``.

- :mod:`~themisto.building.selection`: which steps become examples (eligibility, the test sample)
- :mod:`~themisto.building.history`: what an example carries from before its step (history, runtime state)
- :mod:`~themisto.building.categories`: the output and step kinds, duplicates, runtime-only targets
- :mod:`~themisto.building.prompts`: the prompts and runtime blocks a model sees
- :mod:`~themisto.building.placebo`: the placebo arm's runtime state of another step
- :mod:`~themisto.building.tables`: examples as Arrow tables, one per config
- :mod:`~themisto.building.parquet`: the Parquet files, written atomically
- :mod:`~themisto.building.forked`: part of a build's work in a forked process, answering as JSON
- :mod:`~themisto.building.summary`: what a build produced, for the card
- :mod:`~themisto.building.card`: the dataset card, written from the summary and ``card_template.md``
- :mod:`~themisto.building.card_reading`: a build read back through its card (options, data files)
- :mod:`~themisto.building.lookup`: one example pair, as ``themisto show`` prints it
- :mod:`~themisto.building.publish`: the upload of a build to the Hugging Face Hub
"""

import os

# The process counts a build runs in: one, or two that split its configs (themisto.building.parquet).
BUILD_JOBS = (1, 2)


def default_build_jobs() -> int:
    """Two processes where this process may run on two cores or more (a build's fastest), else one."""
    return 2 if len(os.sched_getaffinity(0)) >= 2 else 1
