"""Stage 1, recording: drive real Jupyter kernels through notebooks and development logs.

In: notebooks (``.ipynb``), JuNE event logs (``.csv``, ``.jsonl``, ``.parquet``)
or the published Zenodo record. Out: one trajectory JSONL file per kernel
session (:mod:`themisto.trajectory`) with its provenance file beside it, and,
from ``themisto stability``, the same trajectories annotated with whether each
output reproduces.

- :mod:`~themisto.recording.sources`: readers that turn a notebook or a log into actions
- :mod:`~themisto.recording.options`: the recording options, and how a recording's own options prevail
- :mod:`~themisto.recording.provenance`: how a trajectory was made, in the file beside it
- :mod:`~themisto.recording.environment`: the kernel's scrubbed environment, kernel spec and limits
- :mod:`~themisto.recording.launcher`: the process that supervises a kernel: limits, no process left behind
- :mod:`~themisto.recording.transport`: one kernel process, its channels, an execute request and its faults
- :mod:`~themisto.recording.snapshots`: the snapshot a kernel sends back, checked against what the host knows
- :mod:`~themisto.recording.kernel`: the recorder: a kernel's cells, snapshots and faults as steps
- :mod:`~themisto.recording.inject`: installs the kernel-side code (:mod:`themisto.kernelside`) and calls it
- :mod:`~themisto.recording.outputs`: outputs collected, rendered as text, normalised
- :mod:`~themisto.recording.record`: a whole corpus: resume, shards, a pool of kernels
- :mod:`~themisto.recording.stability`: re-execution: determinism ceiling and replay fidelity
- :mod:`~themisto.recording.fidelity`: a replay against its source's stored outputs: exact, normalised, unknown
- :mod:`~themisto.recording.instability`: the causes named for a step whose output does not reproduce
- :mod:`~themisto.recording.zenodo`: the importer of the published record
"""
