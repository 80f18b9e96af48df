"""Stage 1, recording: drive real Jupyter kernels through notebooks and development logs.

In: notebooks (``.ipynb``), JuNE event logs (``.csv``, ``.jsonl``, ``.parquet``)
or the published Zenodo record. Out: one trajectory JSONL file per kernel
session (:mod:`themisto.trajectory`) with its provenance file beside it
(:mod:`themisto.provenance`), and, from ``themisto stability``, the same
trajectories annotated with whether each output reproduces. The kernel itself (its process, sandbox, snapshots and the
recorder's step loop) is :mod:`themisto.kernel`, shared with exec-score.

- :mod:`~themisto.recording.sources`: readers that turn a notebook or a log into actions
- :mod:`~themisto.recording.options`: the recording options: the kernel's, and what a recording adds
- :mod:`~themisto.recording.record`: a whole corpus: resume, shards, a pool of kernels
- :mod:`~themisto.recording.stability`: re-execution: determinism ceiling and replay fidelity
- :mod:`~themisto.recording.fidelity`: a replay against its source's stored outputs: exact, normalised, unknown
- :mod:`~themisto.recording.instability`: the causes named for a step whose output does not reproduce
- :mod:`~themisto.recording.zenodo`: the importer of the published record
"""
