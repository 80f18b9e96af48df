"""Stage 2, building: trajectories become the benchmark's dataset.

In: trajectory JSONL files. Out: a dataset folder (``hf_dataset/``) with one
Parquet file per config and split and a ``README.md`` dataset card, readable
by ``datasets.load_dataset(folder, config)``.

- :mod:`~themisto.building.tasks`: which steps become examples (selection, sampling, history)
- :mod:`~themisto.building.prompts`: the prompts and runtime blocks a model sees
- :mod:`~themisto.building.tables`: examples as Arrow tables, one per config
- :mod:`~themisto.building.parquet`: the Parquet files, written atomically
- :mod:`~themisto.building.card`: the dataset card
- :mod:`~themisto.building.lookup`: one example pair, as ``themisto show`` prints it
"""
