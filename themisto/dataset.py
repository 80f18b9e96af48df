"""The Hugging Face ``datasets`` builder of Themisto, and its materialisation as Parquet + card.

:class:`ThemistoBuilder` is a ``GeneratorBasedBuilder`` with five configs:

- ``trajectories``: the raw steps, one split ``full``;
- ``output_prediction`` / ``output_prediction_runtime`` and
  ``next_cell_prediction`` / ``next_cell_prediction_runtime``: the task
  examples without / with the runtime block, splits ``test`` (the sample) and
  ``full`` (every eligible example).

``datasets`` 4 and later refuse loading scripts, so :func:`build_dataset` runs
the builder and writes its splits as ``<folder>/<config>/<split>.parquet`` plus
a ``README.md`` dataset card whose YAML ``configs:`` block names those files.
``datasets.load_dataset(folder, config, split=...)`` then reads the folder as
it is, locally or after ``push_to_hub``.

A build is byte-for-byte reproducible from the same trajectories and options:
rows come out in trajectory-file order, the sample is drawn with a seeded
``random.Random``, floats are copied from the JSON unchanged, and neither the
Parquet metadata nor the card holds a timestamp or an absolute path.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets

from themisto.exceptions import InputError
from themisto.serialize import RenderOptions, render_pair
from themisto.tasks import TASKS, Example, Selection, SelectionOptions, iter_examples, select
from themisto.trajectory import Step, Variable, iter_steps

TRAJECTORIES = "trajectories"
RUNTIME_SUFFIX = "_runtime"
TASK_CONFIGS = tuple(name for task in TASKS for name in (task, task + RUNTIME_SUFFIX))
CONFIG_NAMES = (TRAJECTORIES, *TASK_CONFIGS)
TASK_SPLITS = ("test", "full")
TRAJECTORY_SPLIT = "full"
BUILD_OPTIONS_KEY = "themisto_build"  # card YAML key holding the options of the build

_VARIABLE = {
    "name": datasets.Value("string"),
    "type": datasets.Value("string"),
    "size_bytes": datasets.Value("int64"),
    "repr": datasets.Value("string"),
    "repr_truncated": datasets.Value("bool"),
    "repr_failed": datasets.Value("bool"),
    "shape": datasets.List(datasets.Value("int64")),
    "len": datasets.Value("int64"),
    "size_method": datasets.Value("string"),
}

TASK_FEATURES = datasets.Features(
    {
        "example_id": datasets.Value("string"),
        "trajectory_id": datasets.Value("string"),
        "step": datasets.Value("int64"),
        "history": datasets.List({"code": datasets.Value("string"), "output": datasets.Value("string")}),
        "history_dropped": datasets.Value("int64"),
        "code": datasets.Value("string"),
        "runtime": datasets.List(_VARIABLE),
        "memory_bytes_before": datasets.Value("int64"),
        "runtime_text": datasets.Value("string"),
        "prompt": datasets.Value("string"),
        "target": datasets.Value("string"),
        "target_is_error": datasets.Value("bool"),
        "stable": datasets.Value("bool"),
    }
)

TRAJECTORY_FEATURES = datasets.Features(
    {
        "trajectory_id": datasets.Value("string"),
        "step": datasets.Value("int64"),
        "cell_id": datasets.Value("string"),
        "code": datasets.Value("string"),
        "output": datasets.Value("string"),
        "error": {"ename": datasets.Value("string"), "evalue": datasets.Value("string")},
        "execution_time": datasets.Value("float64"),
        "memory_bytes": datasets.Value("int64"),
        "runtime": datasets.List(_VARIABLE),
        "state_hash": datasets.Value("string"),
        "restarted": datasets.Value("bool"),
        "outputs_json": datasets.Value("string"),  # raw nbformat outputs as JSON text (their shape varies)
        "original_output": datasets.Value("string"),
        "output_truncated": datasets.Value("bool"),
        "output_length": datasets.Value("int64"),
        "stable": datasets.Value("bool"),
    }
)

CITATION = """@article{grotov2025themisto,
  title   = {Themisto: Jupyter-Based Runtime Benchmark},
  author  = {Grotov, Konstantin and Titov, Sergey},
  journal = {arXiv preprint arXiv:2504.12365},
  year    = {2025}
}"""


@dataclass
class ThemistoConfig(datasets.BuilderConfig):
    """A Themisto config: which task (None for raw trajectories), with or without runtime."""

    task: str | None = None
    with_runtime: bool = False
    trajectories: tuple[str, ...] = ()  # trajectory JSONL files, in build order
    selection: SelectionOptions = field(default_factory=SelectionOptions)
    render: RenderOptions = field(default_factory=RenderOptions)


def _config(name: str) -> ThemistoConfig:
    if name == TRAJECTORIES:
        return ThemistoConfig(name=name, description="Raw trajectory steps.")
    task = name.removesuffix(RUNTIME_SUFFIX)
    runtime = name.endswith(RUNTIME_SUFFIX)
    what = "with the runtime state before the step" if runtime else "without runtime state"
    return ThemistoConfig(name=name, task=task, with_runtime=runtime, description=f"{task}, {what}.")


class ThemistoBuilder(datasets.GeneratorBasedBuilder):
    """Builds the Themisto configs from trajectory JSONL files."""

    BUILDER_CONFIG_CLASS = ThemistoConfig
    BUILDER_CONFIGS = [_config(name) for name in CONFIG_NAMES]
    DEFAULT_CONFIG_NAME = "output_prediction"
    config: ThemistoConfig

    def _info(self) -> datasets.DatasetInfo:
        features = TRAJECTORY_FEATURES if self.config.task is None else TASK_FEATURES
        return datasets.DatasetInfo(
            description=self.config.description,
            features=features,
            citation=CITATION,
            homepage="https://arxiv.org/abs/2504.12365",
        )

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        if self.config.task is None:
            return [datasets.SplitGenerator(name=TRAJECTORY_SPLIT, gen_kwargs={"ids": None, "keep_test": False})]
        chosen = self.selection().tasks[self.config.task]
        # `full` goes first and keeps the rows of a (paper) test sample, so `test` needs no second pass
        keep_test = len(chosen.test) < len(chosen.full)
        return [
            datasets.SplitGenerator(name="full", gen_kwargs={"ids": chosen.full, "keep_test": keep_test}),
            datasets.SplitGenerator(name="test", gen_kwargs={"ids": chosen.test, "keep_test": False}),
        ]

    # set by build_dataset so that the four task configs share one selection pass
    cached_selection: Selection | None = None
    # rows of the test sample, kept while the `full` split is generated
    _test_rows: dict[str, dict[str, Any]] | None = None

    def selection(self) -> Selection:
        """The selection of this builder's inputs and options (computed once)."""
        if self.cached_selection is None:
            self.cached_selection = select(self._paths(), self.config.selection)
        return self.cached_selection

    def _paths(self) -> list[Path]:
        return [Path(p) for p in self.config.trajectories]

    def _generate_examples(self, ids: list[str] | None, keep_test: bool) -> Iterator[tuple[str, dict[str, Any]]]:
        if ids is None:
            for path in self._paths():
                for step in iter_steps(path):
                    yield f"{step.trajectory_id}/{step.step}", trajectory_row(step)
            return
        if self._test_rows is not None and all(key in self._test_rows for key in ids):
            for key in ids:
                yield key, self._test_rows[key]
            return
        test_ids = set(self.selection().tasks[self.config.task].test) if keep_test else set()
        kept = {}
        for example in iter_examples(self._paths(), self.config.task, ids, self.config.selection.max_context_chars):
            row = self._task_row(example)
            if example.example_id in test_ids:
                kept[example.example_id] = row
            yield example.example_id, row
        if keep_test:
            self._test_rows = kept

    def _task_row(self, example: Example) -> dict[str, Any]:
        pair = render_pair(example, self.config.render)
        runtime = self.config.with_runtime
        return {
            "example_id": example.example_id,
            "trajectory_id": example.trajectory_id,
            "step": example.step,
            "history": [{"code": cell.code, "output": cell.output} for cell in example.history],
            "history_dropped": example.history_dropped,
            "code": example.code,
            "runtime": [variable_row(v) for v in example.runtime] if runtime else [],
            "memory_bytes_before": example.memory_bytes_before if runtime else None,
            "runtime_text": pair.runtime_text if runtime else "",
            "prompt": pair.with_runtime if runtime else pair.without_runtime,
            "target": example.target,
            "target_is_error": example.target_is_error,
            "stable": example.stable,
        }


_VARIABLE_FIELDS = tuple(_VARIABLE)
_STEP_SCALARS = tuple(name for name in TRAJECTORY_FEATURES if name not in ("runtime", "outputs_json"))


def variable_row(variable: Variable) -> dict[str, Any]:
    # a flat getattr copy: dataclasses.asdict deep-copies recursively and dominated build time
    return {name: getattr(variable, name) for name in _VARIABLE_FIELDS}


def trajectory_row(step: Step) -> dict[str, Any]:
    """A step as a row of the ``trajectories`` config."""
    row = {name: getattr(step, name) for name in _STEP_SCALARS}
    row["runtime"] = [variable_row(v) for v in step.runtime]
    row["outputs_json"] = json.dumps(step.outputs, ensure_ascii=False, sort_keys=True)
    return row


@dataclass
class BuildSummary:
    """What a build produced: the selection, the options and the row counts per config and split."""

    selection: Selection
    selection_options: SelectionOptions
    render_options: RenderOptions
    rows: dict[str, dict[str, int]]
    trajectory_files: list[str]  # file names only, so the card does not depend on where inputs lie


def parquet_path(folder: Path, config: str, split: str) -> Path:
    """Where a build puts one split of one config."""
    return Path(folder) / config / f"{split}.parquet"


def config_splits(config: str) -> tuple[str, ...]:
    return (TRAJECTORY_SPLIT,) if config == TRAJECTORIES else TASK_SPLITS


def build_dataset(
    trajectories: Sequence[Path],
    out_dir: Path,
    selection: SelectionOptions | None = None,
    render: RenderOptions | None = None,
    license_id: str = "apache-2.0",
) -> BuildSummary:
    """Run the builder over ``trajectories`` and write every config as Parquet plus a dataset card."""
    selection = selection or SelectionOptions()
    render = render or RenderOptions()
    out_dir = Path(out_dir)
    paths = tuple(str(Path(p).resolve()) for p in trajectories)
    rows: dict[str, dict[str, int]] = {}
    # selection reads and validates every step first, so bad input fails before anything is written
    chosen = select([Path(p) for p in paths], selection)
    for task, ids in chosen.tasks.items():
        if not ids.full:
            raise InputError(
                f"no eligible {task} examples among {chosen.steps} steps ({chosen.errors} exceptions); "
                "see --include-errors, --quantile and --stable-only"
            )
    with tempfile.TemporaryDirectory(prefix="themisto-build-") as tmp:
        staged = Path(tmp) / "out"
        for config in CONFIG_NAMES:
            builder = ThemistoBuilder(
                config_name=config,
                cache_dir=str(Path(tmp) / "cache"),
                trajectories=paths,
                selection=selection,
                render=render,
            )
            builder.cached_selection = chosen
            _prepare(builder)
            rows[config] = {}
            for split in config_splits(config):
                produced = sorted(Path(builder.cache_dir).glob(f"*-{split}*.parquet"))
                if len(produced) != 1:
                    raise RuntimeError(f"expected one Parquet file for {config}/{split}, found {len(produced)}")
                target = parquet_path(staged, config, split)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(produced[0], target)
                rows[config][split] = builder.info.splits[split].num_examples
        summary = BuildSummary(chosen, selection, render, rows, [Path(p).name for p in paths])
        showcase = _showcase_row(parquet_path(staged, "output_prediction" + RUNTIME_SUFFIX, "test"))
        (staged / "README.md").write_text(dataset_card(summary, license_id, showcase), encoding="utf-8")
        _replace_build(staged, out_dir)
    return summary


def _showcase_row(path: Path) -> dict[str, Any] | None:
    """The first row of a runtime split whose state has variables (else its first row)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path, columns=["example_id", "runtime_text", "runtime"]).to_pylist()
    return next((row for row in rows if row["runtime"]), rows[0] if rows else None)


def _prepare(builder: ThemistoBuilder) -> None:
    """Run the builder into its cache as Parquet; input errors surface as themselves, not wrapped."""
    try:
        builder.download_and_prepare(file_format="parquet")
    except datasets.exceptions.DatasetGenerationError as exc:
        if isinstance(exc.__cause__, InputError):
            raise exc.__cause__ from None
        raise


def _replace_build(staged: Path, out_dir: Path) -> None:
    """Move a finished build into ``out_dir``, replacing only the files a build owns."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for config in CONFIG_NAMES:
        shutil.rmtree(out_dir / config, ignore_errors=True)
        shutil.move(str(staged / config), str(out_dir / config))
    shutil.move(str(staged / "README.md"), str(out_dir / "README.md"))


@dataclass
class ExamplePair:
    """The two rows of one example: without (``plain``) and with (``runtime``) the runtime block."""

    task: str
    example_id: str
    split: str
    plain: dict[str, Any]
    runtime: dict[str, Any]


def find_pair(folder: str | Path, config: str, example_id: str) -> ExamplePair:
    """Both rows of ``example_id`` in a built dataset, looked up in ``test`` first, then ``full``."""
    import pyarrow.parquet as pq

    task = config.removesuffix(RUNTIME_SUFFIX)
    if task not in TASKS:
        raise InputError(f"unknown config {config!r}; expected one of {', '.join(TASK_CONFIGS)}")
    if not (Path(folder) / "README.md").is_file():
        raise InputError(f"{folder} is not a built dataset folder (no README.md); run `themisto build` first")
    for split in TASK_SPLITS:
        rows = []
        for name in (task, task + RUNTIME_SUFFIX):
            path = parquet_path(Path(folder), name, split)
            if not path.is_file():
                raise InputError(f"{path} is missing; rebuild the dataset")
            rows.append(pq.read_table(path, filters=[("example_id", "=", example_id)]).to_pylist())
        if rows[0] and rows[1]:
            return ExamplePair(task, example_id, split, rows[0][0], rows[1][0])
    raise InputError(f"no example {example_id!r} in {task} (ids look like <trajectory_id>/<step>)")


def _size_category(rows: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if rows < limit:
            return name
    return "1M<n<10M"


def _card_yaml(summary: BuildSummary, license_id: str) -> str:
    largest = max(n for splits in summary.rows.values() for n in splits.values())
    lines = [
        "---",
        "pretty_name: Themisto",
        f"license: {license_id}",
        "language:",
        "- en",
        "task_categories:",
        "- text-generation",
        "tags:",
        "- code",
        "- jupyter",
        "- notebooks",
        "- runtime",
        "- benchmark",
        "size_categories:",
        f"- {_size_category(largest)}",
        "configs:",
    ]
    for config in CONFIG_NAMES:
        lines.append(f"- config_name: {config}")
        if config == ThemistoBuilder.DEFAULT_CONFIG_NAME:
            lines.append("  default: true")
        lines.append("  data_files:")
        for split in config_splits(config):
            lines += [f"  - split: {split}", f"    path: {config}/{split}.parquet"]
    # the options of this build, so `read_build_options` can rebuild it byte for byte
    lines.append(f"{BUILD_OPTIONS_KEY}:")
    options = {**asdict(summary.selection_options), **asdict(summary.render_options)}
    lines += [f"  {key}: {json.dumps(value)}" for key, value in options.items()]
    lines.append("---")
    return "\n".join(lines) + "\n"


def read_build_options(folder: str | Path) -> tuple[SelectionOptions, RenderOptions, str]:
    """The selection and render options and license of a built dataset, from its card."""
    import yaml

    card = Path(folder) / "README.md"
    try:
        front = card.read_text(encoding="utf-8").split("---\n", 2)[1]
        meta = yaml.safe_load(front)
        options = meta[BUILD_OPTIONS_KEY]
        selection = SelectionOptions(**{k: options[k] for k in SelectionOptions.__dataclass_fields__})
        render = RenderOptions(**{k: options[k] for k in RenderOptions.__dataclass_fields__})
        return selection, render, str(meta["license"])
    except (OSError, IndexError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise InputError(f"{card}: not a Themisto dataset card with build options ({exc})") from None


def dataset_card(summary: BuildSummary, license_id: str, showcase: dict[str, Any] | None = None) -> str:
    """The README.md dataset card of a build: YAML configs, then what a reader needs to know.

    ``showcase`` (``example_id`` and ``runtime_text`` of one runtime row) is quoted so a reader sees
    what the runtime condition adds to a prompt.
    """
    sel, opts, render = summary.selection, summary.selection_options, summary.render_options
    count_rows = "\n".join(
        f"| `{config}` | " + " | ".join(str(summary.rows[config].get(split, "—")) for split in TASK_SPLITS) + " |"
        for config in CONFIG_NAMES
    )
    strata = "\n".join(
        f"- `{task}`: {len(chosen.full)} eligible, {len(chosen.test)} in `test`"
        + (f" (rank quartile sizes Q1 / Q2+Q3 / Q4: {' / '.join(map(str, chosen.strata))})" if chosen.strata else "")
        for task, chosen in sel.tasks.items()
    )
    files = ", ".join(f"`{name}`" for name in summary.trajectory_files)
    sample = (
        f"`paper`: 10 examples from the first target-length quartile, 180 from the second and third, "
        f"10 from the fourth (seed {opts.seed})"
        if opts.sample == "paper"
        else "`all`: the `test` split holds every eligible example"
    )
    errors_rule = "kept (`--include-errors`); `target_is_error` marks them" if opts.include_errors else "dropped"
    stability_rule = (
        "Only steps whose output was reproducible across re-executions (`stable`) are kept."
        if opts.stable_only
        else "Stability is not used for selection; `stable` records it when known."
    )
    return f"""{_card_yaml(summary, license_id)}
# Themisto: a Jupyter runtime benchmark

Themisto measures whether language models can use the *runtime state* of a
Jupyter session. It is built from notebook development trajectories: the real
order in which cells were executed, with edits, re-runs, errors and restarts,
and after every step the output, execution time, kernel memory and a snapshot of
the user's variables. Two tasks are derived from them, each with and without
the runtime state in the prompt:

- **output prediction**: given the previous (code, output) pairs of the session
  and the code of the next cell, predict that cell's output;
- **next cell prediction**: given the previous (code, output) pairs, predict the
  code of the next executed cell.

The paired configs (`X` and `X_runtime`) hold the same example ids, and the two
prompts of a pair are identical except for the runtime block (`runtime_text`),
so any score difference is due to the runtime state alone.

```python
from datasets import load_dataset
test = load_dataset("hf_dataset", "output_prediction_runtime", split="test")
```

## Configs and row counts of this build

| config | `test` | `full` |
| --- | --- | --- |
{count_rows}

`trajectories` has a single split, `full`: every recorded step. Task configs
have `test` (the sample the evaluation uses) and `full` (every eligible example).

## How it was built

Built with `themisto build` from {sel.trajectories} trajectories ({sel.steps}
steps, {sel.errors} of them exceptions) in {files}. Each trajectory was recorded
by re-executing a notebook or a JuNE event log step by step in a real Jupyter
kernel, capturing after each step the code, its plain-text output, the error,
execution time, kernel memory (RSS) and a snapshot of the user namespace
(name, type, size, repr, shape/len), with a hash of the state.

For step *t* the runtime state is the snapshot taken after step *t-1* (never
after step *t*, which would leak the answer); it is empty for the first step
and after a kernel restart. The history holds the cells of the same kernel
session only (a restart starts a new, empty history), cut from the oldest end
to {opts.max_context_chars} characters of code and output, whole cells only
(`history_dropped` counts the cells left out).

## Selection protocol

1. Steps whose code is longer than {sel.max_code_chars:g} characters or whose
   output is longer than {sel.max_output_chars:g} characters (the
   {opts.quantile:g} quantiles over all steps) are dropped.
2. Steps whose output is an exception are {errors_rule}.
3. {stability_rule}
4. Sample: {sample}. Strata are rank quartiles of the target length (output
   length for output prediction, code length for next cell), ties broken by
   example id; a stratum with too few examples gives all it has.

{strata}

## Runtime context

The runtime block of this build uses the `{render.runtime_format}` format, at
most {render.max_runtime_chars} characters, each repr cut to
{render.max_repr_chars} characters. Formats `themisto build` offers:

- `text`: one entry per variable (name, type, size in bytes, shape/len) and
  its repr;
- `json`: `{{"variables": [...], "not_shown": k}}`, one variable object a line;
- `referenced`: the `text` format restricted to the variables the target
  cell's code refers to (for next cell prediction: the last
  {render.referenced_window} history cells), found with Python's `ast`.

Variables that do not fit are left out whole, in snapshot order, and counted.
The block is never empty: a session without variables says so.
{_showcase(showcase)}
## Fields

Task configs:

- `example_id` (string): `<trajectory_id>/<step>`, the same in both configs of a pair
- `trajectory_id` (string), `step` (int64): the step being predicted
- `history` (list of `{{code, output}}`): earlier cells of the session, oldest first
- `history_dropped` (int64): session cells left out by the context budget
- `code` (string): the target cell's code for output prediction; empty for next cell prediction
- `runtime` (list of variables `{{name, type, size_bytes, repr, repr_truncated, repr_failed, shape, len,
  size_method}}`): the state before the step; empty in the configs without runtime
- `memory_bytes_before` (int64, nullable): kernel memory before the step; null without runtime
- `runtime_text` (string): the rendered runtime block; empty without runtime
- `prompt` (string): the full prompt a model sees
- `target` (string): the expected output (output prediction) or code (next cell prediction)
- `target_is_error` (bool): the target step raised an exception
- `stable` (bool, nullable): the step's output was identical across re-executions; null when unknown

`trajectories`: `trajectory_id`, `step`, `cell_id`, `code`, `output`, `error`
(`{{ename, evalue}}` or null), `execution_time` (seconds), `memory_bytes`,
`runtime` (the snapshot after the step), `state_hash`, `restarted`,
`outputs_json` (raw nbformat outputs, size-capped, as JSON text),
`original_output`, `output_truncated`, `output_length`, `stable`.

## Evaluation

The lm-evaluation-harness tasks `themisto_output`, `themisto_output_runtime`,
`themisto_next_cell` and `themisto_next_cell_runtime` read the `test` split of
the matching config and score exact match, ROUGE-L and chrF per example.

## Citation

This dataset follows the benchmark of Grotov & Titov (2025):

```bibtex
{CITATION}
```

## License

{license_id}. Trajectories imported from the published Themisto record
(Zenodo 14861889) remain under that record's license.
"""


def _showcase(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    fence_marks = "`" * 4  # the block itself may contain triple backticks
    return (
        f"\nThe runtime block of example `{row['example_id']}` (`output_prediction_runtime`, `test`); "
        f"`themisto show output_prediction {row['example_id']}` prints both prompts of the pair:\n\n"
        f"{fence_marks}text\n{row['runtime_text'].rstrip()}\n{fence_marks}\n"
    )
