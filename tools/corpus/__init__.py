"""The generator of the bundled corpus: seeded data files, simulated developers, real kernels, JuNE logs.

- :mod:`~tools.corpus.make_files` writes ``data/files/`` from seeded generators;
- :mod:`~tools.corpus.scenarios` holds one module per notebook scenario: its
  family, its notebook name and its *plan*, the notebook as plain code written
  through a :class:`~tools.corpus.developer.Developer`;
- :mod:`~tools.corpus.developer` plays a plan with a persona's habits (slips,
  re-runs, restarts, interrupts, quick looks at what a cell made);
- :mod:`~tools.corpus.sessions` says who solves which scenario, and when;
- :mod:`~tools.corpus.notebook` is the notebook a session drives: live
  kernels, cells and the JuNE events every action emits;
- :mod:`~tools.corpus.make_logs` plays every session and writes ``data/logs/``;
- :mod:`~tools.corpus.corpus_stats` measures the logs and a build of them.

``make corpus`` runs both writers; regenerating gives the committed files byte
for byte (see data/README.md, "Reproducibility").
"""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
FILES_DIR = REPOSITORY / "data" / "files"  # what the sessions' notebooks read, as files/<name>
LOGS_DIR = REPOSITORY / "data" / "logs"
