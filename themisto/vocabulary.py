"""The names every stage shares: tasks, dataset configs, splits, lm-eval tasks, baselines, metrics, causes.

Stages meet only in files (trajectory JSONL, Parquet + card, lm-eval sample
logs); this module is the one place where the names those files use are
spelled. It imports nothing, so the CLI can build its parser from it cheaply.
"""

from __future__ import annotations

# The two tasks, each built with and without the runtime block, and with a placebo block.
OUTPUT_PREDICTION = "output_prediction"
NEXT_CELL_PREDICTION = "next_cell_prediction"
TASKS = (OUTPUT_PREDICTION, NEXT_CELL_PREDICTION)

# A task's config with the runtime block is its name plus this suffix.
RUNTIME_SUFFIX = "_runtime"
# The placebo arm: the runtime prompt with the runtime block of another step (wrong information, same format).
PLACEBO_SUFFIX = "_placebo"
# The arms of a task, each a config and an lm-eval task: plain, runtime, placebo.
ARM_SUFFIXES = ("", RUNTIME_SUFFIX, PLACEBO_SUFFIX)
# The config of the raw trajectory steps.
TRAJECTORIES = "trajectories"
TASK_CONFIGS = tuple(task + arm for task in TASKS for arm in ARM_SUFFIXES)
CONFIG_NAMES = (TRAJECTORIES, *TASK_CONFIGS)
DEFAULT_CONFIG = OUTPUT_PREDICTION

# ``test``: the paper's 200-example stratified sample; ``full``: every eligible example.
SPLITS = ("test", "full")
DEFAULT_SPLIT = "test"
TRAJECTORY_SPLIT = "full"

# lm-evaluation-harness: the group and its four tasks, each reading one dataset config.
LM_EVAL_GROUP = "themisto"
OUTPUT_TASK = "themisto_output"
NEXT_CELL_TASK = "themisto_next_cell"
_TASK_OF_LM_EVAL = {OUTPUT_TASK: OUTPUT_PREDICTION, NEXT_CELL_TASK: NEXT_CELL_PREDICTION}
# The generative tasks of the group (plain and runtime of both tasks) and the two placebo ones beside it.
GROUP_TASKS = {name + arm: task + arm for name, task in _TASK_OF_LM_EVAL.items() for arm in ARM_SUFFIXES[:2]}
PLACEBO_TASKS = {name + PLACEBO_SUFFIX: task + PLACEBO_SUFFIX for name, task in _TASK_OF_LM_EVAL.items()}
# The likelihood tasks: bits per byte of the target under each arm's prompt, in the group ``themisto_bpb``.
BPB_SUFFIX = "_bpb"
BPB_GROUP = "themisto_bpb"
BPB_TASKS = {name + arm + BPB_SUFFIX: task + arm for name, task in _TASK_OF_LM_EVAL.items() for arm in ARM_SUFFIXES}
# Every lm-eval task of the folder and the dataset config it reads.
LM_EVAL_TASKS = {**GROUP_TASKS, **PLACEBO_TASKS, **BPB_TASKS}
LM_EVAL_GROUPS = (LM_EVAL_GROUP, BPB_GROUP)
# Task metadata keys: a task YAML names its dataset config under CONFIG_KEY; ``themisto eval`` and
# ``evaluate()`` add the data location and split. lm-eval passes a task's metadata to its
# ``custom_dataset`` loader as keywords (and writes it to the results file, where the report reads
# the split), so these are the parameter names of ``evaluation.data.load_task_dataset``.
CONFIG_KEY = "themisto_config"
DATA_KEY = "themisto_data"
SPLIT_KEY = "themisto_split"
# The key of an lm-eval results JSON holding the run's short model name and the model's full arguments.
RUN_KEY = "themisto_run"
# The filter every task applies to a response (unwrap a fenced answer); results are keyed "<metric>,answer".
ANSWER_FILTER = "answer"
# The pairs of tasks that differ only by the runtime block: (without, with).
TASK_PAIRS = tuple((task, task + RUNTIME_SUFFIX) for task in (OUTPUT_TASK, NEXT_CELL_TASK))
# The likelihood tasks' per-sample metrics: [loglikelihood in nats, target UTF-8 bytes] (lm-eval's
# ``bits_per_byte`` convention; bits/byte = -ll / bytes / ln 2), and whether the target is the greedy answer.
BPB_METRIC = "bits_per_byte"
GREEDY_METRIC = "greedy_match"

# Per-sample metrics, in the order tables show them.
METRIC_NAMES = ("exact_match", "exact_match_norm", "rougeL", "chrf")
BINARY_METRICS = ("exact_match", "exact_match_norm")

# The built-in baselines, registered as lm-eval models under these names.
BASELINE_PREFIX = "themisto-"
EMPTY_BASELINE = "themisto-empty"
REPEAT_LAST_BASELINE = "themisto-repeat-last"
REPR_ECHO_BASELINE = "themisto-repr-echo"
STATE_LOOKUP_BASELINE = "themisto-state-lookup"
MAJORITY_BASELINE = "themisto-majority"
HEURISTIC_BASELINE = "themisto-heuristic"
# The floors that need no re-run: notebooks people publish run every cell once.
SIMILAR_CELL_BASELINE = "themisto-similar-cell"
SHAPE_MAJORITY_BASELINE = "themisto-shape-majority"
BASELINES = (
    EMPTY_BASELINE,
    REPEAT_LAST_BASELINE,
    REPR_ECHO_BASELINE,
    STATE_LOOKUP_BASELINE,
    MAJORITY_BASELINE,
    HEURISTIC_BASELINE,
    SIMILAR_CELL_BASELINE,
    SHAPE_MAJORITY_BASELINE,
)
# The likelihood control: a compressor's conditional code length of the target as its log-likelihood
# (loglikelihood requests only, so it runs on the themisto_bpb tasks).
COMPRESSION_BASELINE = "themisto-compression"
# lm-eval's hf model scoring the arms of an example over one pass of their shared history
# (themisto.evaluation.shared_prefix); registered only when named, as it imports torch.
SHARED_PREFIX_MODEL = "themisto-hf-shared"

# Category columns of every task config (see themisto.building.categories): the kind of the
# target step's output and of the step itself; reports break every metric down by them.
OUTPUT_KINDS = ("none", "scalar", "collection", "table", "text", "error", "image")
STEP_KINDS = ("first_run", "rerun_unchanged", "rerun_edited", "after_restart")
# The code of the history cell that marks a kernel restart (its output is empty).
RESTART_MARKER = "# --- kernel restarted ---"
# What separates a prompt from its answer: a prompt ends at its last visible character and the answer (the
# target a likelihood task scores, the text a model generates) starts with this line break, so every scorer
# splits context and continuation at the same place and the target's own leading whitespace stays with it.
TARGET_DELIMITER = "\n"

# The causes of instability ``themisto stability`` names, in the order a step's ``instability`` lists them.
INSTABILITY_CAUSES = (
    "random",
    "time",
    "date",
    "memory_address",
    "object_id",
    "process_id",
    "hash_order",
    "execution_count",
    "filesystem",
    "other",
)

# The environment variable naming the build to evaluate (a folder or a Hub id).
DATA_ENV = "THEMISTO_DATA"
# The Hub dataset the task YAMLs name as `dataset_path`: where `themisto publish` puts the
# reference build, and what lm-eval loads when the task folder runs without this package.
HUB_DATASET_ID = "themisto-bench/themisto"


def task_of_config(config: str) -> str:
    """The task a config belongs to: ``output_prediction_runtime`` (or ``_placebo``) -> ``output_prediction``."""
    return config.removesuffix(RUNTIME_SUFFIX).removesuffix(PLACEBO_SUFFIX)


def arm_of(name: str) -> str:
    """The arm of a config or lm-eval task, one of ARM_SUFFIXES: ``themisto_output_placebo_bpb`` -> ``_placebo``."""
    stem = name.removesuffix(BPB_SUFFIX)
    return next((arm for arm in ARM_SUFFIXES[1:] if stem.endswith(arm)), "")


def is_runtime(name: str) -> bool:
    """Whether a config or lm-eval task is the variant with the runtime block."""
    return arm_of(name) == RUNTIME_SUFFIX


# Dataset columns that sort examples into categories; the report breaks every metric down by them.
CATEGORY_COLUMNS = ("output_kind", "step_kind")
# The dataset column that says whether the target holds a token found in the runtime block and nowhere in
# the plain prompt (the same in every arm of an example): the stratum where only the block can help.
RUNTIME_ONLY_COLUMN = "runtime_only"
# The placebo configs' column naming the step whose state the placebo block shows (null elsewhere).
PLACEBO_OF_COLUMN = "placebo_of"
# The dataset column naming the earlier example a row repeats (null when it repeats none).
DUPLICATE_COLUMN = "duplicate_of"

# ``themisto exec-score`` writes ``exec_samples_<task>.jsonl`` next to a run's
# ``samples_<task>_<timestamp>.jsonl``: per example these 0/1 outcomes (null: excluded).
EXEC_SAMPLES_PREFIX = "exec_samples_"
EXEC_METRICS = ("exec_ok", "exec_match", "state_match")
# The pseudo-model whose prediction is the developer's own next cell: its exec_match is the ceiling.
REFERENCE_MODEL = "themisto-reference"
