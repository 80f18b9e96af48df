# Themisto: `make run` does the main job on the bundled data, `make test` runs the tests.
# Both create (or reuse) the virtual environment .venv and install what they need.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.themisto-installed

.PHONY: run test bench install clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(STAMP)

run: $(STAMP)
	$(PY) -m themisto record data/logs -o data/trajectories --resume

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info runs
