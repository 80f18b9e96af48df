"""Developer tools of this repository, run from its root (``python -m tools.corpus.make_logs``); not installed."""
