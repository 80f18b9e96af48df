"""The Hugging Face ``datasets`` builder of Themisto, and its materialisation as Parquet + card.

:class:`ThemistoBuilder` is a ``GeneratorBasedBuilder`` with five configs:

- ``trajectories``: the raw steps, one split ``full``;
- ``output_prediction`` / ``output_prediction_runtime`` and
  ``next_cell_prediction`` / ``next_cell_prediction_runtime``: the task
  examples without / with the runtime block, splits ``test`` (the sample) and
  ``full`` (every eligible example).

``datasets`` 4 and later refuse loading scripts, so :func:`build_dataset`
writes every split as ``<folder>/<config>/<split>.parquet`` plus a ``README.md``
dataset card whose YAML ``configs:`` block names those files.
``datasets.load_dataset(folder, config, split=...)`` then reads the folder as
it is, locally or after ``push_to_hub``.

Both the builder and :func:`build_dataset` take their rows from
:func:`themisto.tables.iter_tables`. The builder is the definition of the
configs (names, features, splits) that ``datasets`` understands; it generates
one config and split per pass and re-encodes every row in Python, so
:func:`build_dataset` does not run it: it reads the trajectories once more
after selection and streams the Arrow tables of all nine splits straight into
``pyarrow`` Parquet writers with the configs' own schemas (``load_dataset``
sees the same features), in row groups of a fixed number of rows.

A build is byte-for-byte reproducible from the same trajectories and options:
rows come out in trajectory-file order, the sample is drawn with a seeded
``random.Random``, floats are copied from the JSON unchanged, row groups have
fixed sizes, and neither the Parquet metadata nor the card holds a timestamp
or an absolute path.
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
import pyarrow as pa
import pyarrow.parquet as pq

from themisto.exceptions import InputError
from themisto.serialize import RenderOptions
from themisto.tables import (
    BATCH_ROWS,
    CONFIG_NAMES,
    RUNTIME_SUFFIX,
    TASK_CONFIGS,
    TASK_FEATURES,
    TASK_SPLITS,
    TRAJECTORIES,
    TRAJECTORY_FEATURES,
    config_features,
    config_splits,
    iter_tables,
)
from themisto.tasks import TASKS, Selection, SelectionOptions, example_id, select

__all__ = [
    "CONFIG_NAMES",
    "RUNTIME_SUFFIX",
    "TASK_CONFIGS",
    "TASK_FEATURES",
    "TRAJECTORIES",
    "TRAJECTORY_FEATURES",
    "BuildSummary",
    "ExamplePair",
    "ThemistoBuilder",
    "build_dataset",
    "config_splits",
    "dataset_card",
    "find_pair",
    "parquet_path",
    "read_build_options",
]

BUILD_OPTIONS_KEY = "themisto_build"  # card YAML key holding the options of the build

CITATION = """@article{grotov2025themisto,
  title   = {Themisto: Jupyter-Based Runtime Benchmark},
  author  = {Grotov, Konstantin and Titov, Sergey},
  journal = {arXiv preprint arXiv:2504.12365},
  year    = {2025}
}"""


@dataclass
class ThemistoConfig(datasets.BuilderConfig):
    """A Themisto config (its name says the task and runtime variant) and the inputs and options of the build."""

    trajectories: tuple[str, ...] = ()  # trajectory JSONL files, in build order
    selection: SelectionOptions = field(default_factory=SelectionOptions)
    render: RenderOptions = field(default_factory=RenderOptions)


def _config(name: str) -> ThemistoConfig:
    if name == TRAJECTORIES:
        return ThemistoConfig(name=name, description="Raw trajectory steps.")
    what = "with the runtime state before the step" if name.endswith(RUNTIME_SUFFIX) else "without runtime state"
    return ThemistoConfig(name=name, description=f"{name.removesuffix(RUNTIME_SUFFIX)}, {what}.")


class ThemistoBuilder(datasets.GeneratorBasedBuilder):
    """Builds the Themisto configs from trajectory JSONL files."""

    BUILDER_CONFIG_CLASS = ThemistoConfig
    BUILDER_CONFIGS = [_config(name) for name in CONFIG_NAMES]
    DEFAULT_CONFIG_NAME = "output_prediction"
    config: ThemistoConfig

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=self.config.description,
            features=config_features(self.config.name),
            citation=CITATION,
            homepage="https://arxiv.org/abs/2504.12365",
        )

    def _split_generators(self, dl_manager: datasets.DownloadManager) -> list[datasets.SplitGenerator]:
        splits = config_splits(self.config.name)
        return [datasets.SplitGenerator(name=split, gen_kwargs={"split": split}) for split in splits]

    def _generate_examples(self, split: str) -> Iterator[tuple[str, dict[str, Any]]]:
        paths = [Path(p) for p in self.config.trajectories]
        chosen = select(paths, self.config.selection)
        for piece in iter_tables(paths, chosen, self.config.selection.max_context_chars, self.config.render):
            if piece.config == self.config.name and piece.split == split:
                for row in piece.table.to_pylist():
                    yield example_id(row["trajectory_id"], row["step"]), row


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


class _SplitWriter:
    """One split's Parquet file, in row groups of exactly ``BATCH_ROWS`` rows (the last one shorter).

    Fixed row groups keep the bytes independent of how the input was batched.
    zstd rather than the default snappy: a third of the size for the same CPU time
    (each prompt repeats its history), and every Parquet reader `datasets` uses has it.
    """

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(path, schema, compression="zstd")
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._pending_rows += len(table)
        if self._pending_rows >= BATCH_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        table = pa.concat_tables(self._pending)
        whole = len(table) if final else len(table) - len(table) % BATCH_ROWS
        if whole:
            self._writer.write_table(table.slice(0, whole), row_group_size=BATCH_ROWS)
            self.rows += whole
        rest = table.slice(whole)
        self._pending, self._pending_rows = ([rest] if len(rest) else []), len(rest)

    def close(self) -> int:
        """Write what is pending, close the file and return its row count."""
        if self._pending:
            self._flush(final=True)
        self._writer.close()
        return self.rows


def build_dataset(
    trajectories: Sequence[str | Path],
    out_dir: str | Path,
    selection: SelectionOptions | None = None,
    render: RenderOptions | None = None,
    license_id: str = "apache-2.0",
) -> BuildSummary:
    """Write every config of ``trajectories`` as Parquet plus a dataset card into ``out_dir``.

    Two passes over the input: selection reads and validates every step (so bad
    input fails before any rendering), then one pass renders and writes all splits.
    Files are staged next to ``out_dir`` and moved in only when complete.
    """
    selection = selection or SelectionOptions()
    render = render or RenderOptions()
    out_dir = Path(out_dir)
    paths = [Path(p) for p in trajectories]
    chosen = select(paths, selection)
    for task, ids in chosen.tasks.items():
        if not ids.full:
            raise InputError(
                f"no eligible {task} examples among {chosen.steps} steps ({chosen.errors} exceptions); "
                "see --include-errors, --quantile and --stable-only"
            )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # staged in the same file system as out_dir, so moving the result in is a rename, not a copy
    with tempfile.TemporaryDirectory(prefix=".themisto-build-", dir=out_dir.parent) as tmp:
        staged = Path(tmp)
        writers = {
            (config, split): _SplitWriter(parquet_path(staged, config, split), config_features(config).arrow_schema)
            for config in CONFIG_NAMES
            for split in config_splits(config)
        }
        try:
            for piece in iter_tables(paths, chosen, selection.max_context_chars, render):
                writers[piece.config, piece.split].write(piece.table)
        finally:
            counts = {key: writer.close() for key, writer in writers.items()}
        rows = {config: {split: counts[config, split] for split in config_splits(config)} for config in CONFIG_NAMES}
        summary = BuildSummary(chosen, selection, render, rows, [p.name for p in paths])
        showcase = _showcase_row(parquet_path(staged, "output_prediction" + RUNTIME_SUFFIX, "test"))
        (staged / "README.md").write_text(dataset_card(summary, license_id, showcase), encoding="utf-8")
        _replace_build(staged, out_dir)
    return summary


def _showcase_row(path: Path) -> dict[str, Any] | None:
    """The first row of a runtime split whose state has variables (else its first row)."""
    rows = pq.read_table(path, columns=["example_id", "runtime_text", "runtime"]).to_pylist()
    return next((row for row in rows if row["runtime"]), rows[0] if rows else None)


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
        "Only steps whose output was reproducible across re-executions are kept, for both tasks."
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

## Determinism ceiling

{_ceiling(sel)}

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
- `stable` (bool, nullable): the target is reproducible across re-executions. Output prediction: the
  step's output was identical in every re-execution (null when unknown). Next cell prediction: always
  true, as the target is code

`trajectories`: `trajectory_id`, `step`, `cell_id`, `code`, `output`, `error`
(`{{ename, evalue}}` or null), `execution_time` (seconds), `memory_bytes`,
`runtime` (the snapshot after the step), `state_hash`, `restarted`,
`outputs_json` (raw nbformat outputs, size-capped, as JSON text),
`original_output`, `output_truncated`, `output_length`, `stable`, `stable_norm`
(identical after exact-match normalisation), `instability` (detected causes, e.g. `random`, `time`).

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


def _ceiling(sel: Selection) -> str:
    """The share of output-prediction examples whose target a perfect predictor could match exactly."""
    chosen = sel.tasks["output_prediction"]
    if not any(stable + unstable for stable, unstable, _ in chosen.stability.values()):
        return (
            "No step of these trajectories carries stability information, so the ceiling is unknown: "
            "run `themisto stability TRAJECTORIES --runs K -o DIR` and build from DIR."
        )
    rows = "\n".join(
        f"| `{split}` | {stable} | {unstable} | {unknown} | {stable / max(stable + unstable + unknown, 1):.3f} |"
        for split, (stable, unstable, unknown) in chosen.stability.items()
    )
    return f"""An output that differs between re-executions of the same trajectory
(unseeded randomness, timings, memory addresses, process ids, set order) cannot
be predicted exactly. `themisto stability` re-executed every trajectory and
marked each step `stable` when its output was identical in every run and in the
recording. The share of stable targets is the exact-match ceiling of output
prediction (unknown counts as not stable); next-cell targets are code, always
reproducible.

| split | stable | unstable | unknown | ceiling |
| --- | ---: | ---: | ---: | ---: |
{rows}"""


def _showcase(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    fence_marks = "`" * 4  # the block itself may contain triple backticks
    return (
        f"\nThe runtime block of example `{row['example_id']}` (`output_prediction_runtime`, `test`); "
        f"`themisto show output_prediction {row['example_id']}` prints both prompts of the pair:\n\n"
        f"{fence_marks}text\n{row['runtime_text'].rstrip()}\n{fence_marks}\n"
    )
