"""The dataset card of a build: YAML metadata the Hub and ``load_dataset`` read, then prose for a reader."""

from __future__ import annotations

import re
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets
import pyarrow.parquet as pq
from datasets.info import DatasetInfosDict

from themisto.building.prompts import RenderOptions
from themisto.building.tables import VALUE_TYPES, config_features, config_splits
from themisto.building.tasks import Selection, SelectionOptions
from themisto.exceptions import InputError, short_message
from themisto.trajectory import STEP_SCHEMA, VARIABLE_SCHEMA, SchemaField
from themisto.vocabulary import CONFIG_NAMES, DEFAULT_CONFIG, SPLITS

if TYPE_CHECKING:
    from themisto.building.parquet import BuildSummary

BUILD_OPTIONS_KEY = "themisto_build"  # card YAML key holding the options of the build
# build options renamed since cards were first written: old name -> new name
_RENAMED_OPTIONS = {"max_repr_chars": "prompt_repr_chars"}
ARXIV_ID = "2504.12365"  # the paper; an ``arxiv:`` tag makes the Hub link the dataset to it
ZENODO_RECORD = "https://zenodo.org/records/14861889"
# The repository id in the card's usage snippet until `themisto publish` puts the real one there.
HUB_PLACEHOLDER = "<org>/themisto"

# The license identifiers the Hub accepts in a card's ``license:`` field
# (https://huggingface.co/docs/hub/repositories-licenses); huggingface_hub ships no such list.
HUB_LICENSES = frozenset(
    """
    apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0
    bigcode-openrail-m afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear
    c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5 cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0
    cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0 cc-by-nc-nd-4.0 cc-by-nc-sa-2.0
    cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0 cdla-permissive-2.0 wtfpl
    ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl
    lgpl-2.1 lgpl-3.0 isc lppl-1.3c ms-pl apple-ascl mpl-2.0 odc-by odbl openrail++ osl-3.0
    postgresql ofl-1.1 ncsa unlicense zlib pddl lgpl-lr deepfloyd-if-license llama2 llama3 llama3.1
    llama3.2 llama3.3 gemma unknown other
    """.split()
)

CITATION = """@article{grotov2025themisto,
  title   = {Themisto: Jupyter-Based Runtime Benchmark},
  author  = {Grotov, Konstantin and Titov, Sergey},
  journal = {arXiv preprint arXiv:2504.12365},
  year    = {2025}
}"""


def check_license(license_id: str) -> None:
    """Raise :class:`InputError` unless ``license_id`` is one of the Hub's license identifiers."""
    if license_id not in HUB_LICENSES:
        raise InputError(
            f"license {license_id!r} is not a Hugging Face Hub license identifier (e.g. apache-2.0, cc-by-4.0, "
            "mit; 'other' for any other license)"
        )


def _size_category(rows: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if rows < limit:
            return name
    return "1M<n<10M"


def _dataset_infos(folder: Path, files: dict[str, dict[str, str]]) -> DatasetInfosDict:
    """Features and split sizes of every config, as ``load_dataset`` checks them and the Hub shows them.

    ``num_bytes`` is the uncompressed size of a split's Parquet data, read from the file's metadata
    (no row is read again); ``download_size`` the size of the files.
    """
    infos = DatasetInfosDict()
    for config in CONFIG_NAMES:
        splits = datasets.SplitDict()
        download_size = 0
        for split in config_splits(config):
            path = folder / files[config][split]
            meta = pq.ParquetFile(path).metadata
            num_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            splits.add(datasets.SplitInfo(name=split, num_bytes=num_bytes, num_examples=meta.num_rows))
            download_size += path.stat().st_size
        infos[config] = datasets.DatasetInfo(
            features=config_features(config),
            splits=splits,
            download_size=download_size,
            dataset_size=sum(info.num_bytes for info in splits.values()),
        )
    return infos


def card_metadata(summary: BuildSummary, license_id: str, folder: Path) -> str:
    """The card's YAML block (between ``---`` lines), made by huggingface_hub from plain data, never by hand."""
    from huggingface_hub import DatasetCardData

    check_license(license_id)
    largest = max(n for splits in summary.rows.values() for n in splits.values())
    configs = []
    for config in CONFIG_NAMES:
        entry: dict[str, Any] = {"config_name": config}
        if config == DEFAULT_CONFIG:
            entry["default"] = True
        entry["data_files"] = [{"split": split, "path": path} for split, path in summary.files[config].items()]
        configs.append(entry)
    card_data = DatasetCardData(
        pretty_name="Themisto",
        license=license_id,
        language=["en"],
        task_categories=["text-generation"],
        tags=["code", "jupyter", "notebooks", "runtime", "benchmark", f"arxiv:{ARXIV_ID}"],
        size_categories=[_size_category(largest)],
        configs=configs,
        # the license above covers this build; the data it may derive from keeps its own
        license_note=(
            f"{license_id} covers this build (prompts, targets, tables). Trajectories imported from the "
            f"published Themisto record (Zenodo 14861889, {ZENODO_RECORD}) keep that record's license."
        ),
    )
    # the options of this build, so `read_build_options` can rebuild it byte for byte
    card_data[BUILD_OPTIONS_KEY] = {**asdict(summary.selection_options), **asdict(summary.render_options)}
    _dataset_infos(folder, summary.files).to_dataset_card_data(card_data)
    return f"---\n{card_data.to_yaml()}\n---\n"


def _history_budget(chars: int) -> str:
    """The card's sentence on the history budget."""
    if not chars:
        return "The history is whole (`--max-context-chars 0`), as in the paper."
    return (
        f"The history is cut from the oldest end to {chars} characters of code and output, whole cells only"
        " (`history_dropped` counts the cells left out, restart markers included; `--max-context-chars 0`"
        " keeps the whole history, as the paper does)."
    )


def _masking(masked: bool) -> str:
    """The card's sentence on machine-dependent text in outputs."""
    if not masked:
        return "Outputs are shown as recorded (`--keep-machine-text`)."
    return (
        "In the history and the targets, kernel pids (`ipykernel_<pid>`), random temporary names"
        " (`tmp<random>`) and memory addresses (`at 0x?`) are masked (`--keep-machine-text` keeps them)."
    )


def _samples(sample: str, samples: str) -> str:
    """The card's clause on whether both tasks share one test sample (of the paper's draw)."""
    if sample != "paper":
        return ""
    if samples == "shared":
        return "; one sample serves both tasks (`--samples shared`, the paper's reading): the output-prediction draw"
    return "; each task is drawn on its own, by its own target's length (`--samples shared` draws one for both)"


def _descriptions(described: bool) -> str:
    """The card's sentence on the variables' structured descriptions."""
    if not described:
        return "Variables are shown without their structured descriptions (`--no-descriptions`)."
    return (
        "Each variable shows its structured description where it has one (a frame's columns with their dtypes"
        " and its index, a series' name, dtype and index, an array's dtype and range, a container's item"
        " types), kept whole for the variables the target cell reads."
    )


def read_card_metadata(folder: str | Path) -> dict[str, Any]:
    """The YAML metadata of a build's ``README.md`` dataset card, as a dict.

    Raises :class:`InputError` when the card is missing, has no ``---`` block or the block is not a
    YAML mapping, so a broken card is one clear error before any loader trips over it.
    """
    import yaml

    card = Path(folder) / "README.md"
    try:
        text = card.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{card}: cannot read the dataset card ({short_message(exc)})") from None
    match = _YAML_BLOCK.match(text)
    if match is None:
        raise InputError(f"{card}: the dataset card has no YAML block between --- lines")
    try:
        # libyaml's safe loader where installed: the features under dataset_info make the block long
        meta = yaml.load(match[1], Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise InputError(f"{card}: the dataset card's YAML is invalid ({short_message(exc)})") from None
    if not isinstance(meta, dict):
        raise InputError(f"{card}: the dataset card's YAML block is not a mapping")
    return meta


# The metadata block of a card: a first line ``---``, then YAML up to the next ``---`` line.
_YAML_BLOCK = re.compile(r"---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)


def read_build_options(folder: str | Path) -> tuple[SelectionOptions, RenderOptions, str]:
    """The selection and render options and license of a built dataset, from its card."""
    card = Path(folder) / "README.md"
    meta = read_card_metadata(folder)
    try:
        options = meta[BUILD_OPTIONS_KEY]
        for old, new in _RENAMED_OPTIONS.items():  # a card written before an option was renamed
            if old in options and new not in options:
                options[new] = options.pop(old)
        wanted = [*SelectionOptions.__dataclass_fields__, *RenderOptions.__dataclass_fields__]
        missing = [name for name in wanted if name not in options]
        if missing and len(missing) < len(wanted):  # a card of an older Themisto, whose build it cannot redo
            raise InputError(
                f"{card}: built by an older Themisto (its build options lack {', '.join(missing)}): build it again"
            )
        selection = SelectionOptions(**{k: options[k] for k in SelectionOptions.__dataclass_fields__})
        render = RenderOptions(**{k: options[k] for k in RenderOptions.__dataclass_fields__})
        return selection, render, str(meta["license"])
    except (KeyError, TypeError) as exc:
        raise InputError(f"{card}: not a Themisto dataset card with build options ({exc})") from None


def named_files(meta: dict[str, Any], card: Path) -> dict[tuple[str, str], str]:
    """``(config, split) -> path`` (relative to the build folder) for every data file a card's metadata names."""
    named: dict[tuple[str, str], str] = {}
    try:
        for config in meta["configs"]:
            for entry in config["data_files"]:
                named[str(config["config_name"]), str(entry["split"])] = str(entry["path"])
    except (KeyError, TypeError):
        raise InputError(f"{card}: the card's configs block does not list data files by split") from None
    return named


def read_data_files(folder: str | Path) -> dict[tuple[str, str], str]:
    """The data files a build's card names: ``(config, split) -> path`` relative to ``folder``.

    A build names its files after their content (``<config>/<split>-<hash>.parquet``), so the card is
    the one place that says which file holds a split.
    """
    return named_files(read_card_metadata(folder), Path(folder) / "README.md")


def dataset_card(summary: BuildSummary, license_id: str, folder: Path, showcase: dict[str, Any] | None = None) -> str:
    """The README.md dataset card of the build in ``folder``: YAML metadata, then what a reader needs to know.

    ``showcase`` (``example_id`` and ``runtime_text`` of one runtime row) is quoted so a reader sees
    what the runtime condition adds to a prompt.
    """
    sel, opts, render = summary.selection, summary.selection_options, summary.render_options
    count_rows = "\n".join(
        f"| `{config}` | " + " | ".join(str(summary.rows[config].get(split, "—")) for split in SPLITS) + " |"
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
    images_rule = (
        "kept (`--include-images`)"
        if opts.include_images
        else "dropped from output prediction (their target is a placeholder such as `<image/png>`"
        + (
            ", or a figure's text `<Figure size ...>`, `--keep-figure-text` keeps those"
            if opts.figure_text_as_image
            else ""
        )
        + "); they stay in next cell prediction"
    )
    if not opts.include_timing:
        images_rule += "; so are the outputs of cells that measure time and print a duration (`--include-timing`)"
    stability_rule = (
        "Only steps whose output was reproducible across re-executions are kept, for both tasks."
        if opts.stable_only
        else "Stability is not used for selection; `stable` records it when known."
    )
    empty_rule = (
        "kept (`--include-empty`)"
        if opts.include_empty
        else "dropped: a cell without output (output prediction) or an empty cell (next cell prediction) "
        "has an answer too trivial to measure anything"
    )
    history_rule = (
        f"Steps with fewer than {opts.min_history} earlier executions in their trajectory are not drawn into"
        " `test` (`full` keeps them)"
        + (" (the paper's selected cells had at least five earlier actions)." if opts.min_history == 5 else ".")
        if opts.min_history
        else "Every step qualifies whatever the number of earlier executions (`--min-history 0`)."
    )
    return f"""{card_metadata(summary, license_id, folder)}
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
# from the Hub (`themisto publish` writes its repository id here)
test = load_dataset("{HUB_PLACEHOLDER}", "output_prediction_runtime", split="test")
# from a local build folder
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
after step *t*, which would leak the answer); it describes the live kernel, so
it is empty for the first step and right after a kernel restart. The history
is, as in the paper, every earlier execution of the trajectory, across kernel
restarts: what the developer had on screen. A restart appears in it as a cell
of its own, code `# --- kernel restarted ---` and empty output, placed before
the first step run in the new kernel; prompts render it as the line
"--- The kernel was restarted here: variables defined by the cells above no
longer exist. ---". {_history_budget(opts.max_context_chars)}
{_masking(opts.mask_machine_text)} Both prompts of a pair open with a line naming the
kernel's Python and main libraries' versions (from each trajectory's provenance).

## Selection protocol

1. Steps whose code is longer than {sel.max_code_chars:g} characters or whose
   output is longer than {sel.max_output_chars:g} characters (the
   {opts.quantile:g} quantiles over all steps) are dropped.
2. Steps whose output is an exception are {errors_rule}.
3. Steps whose output shows only images (plots) are {images_rule}.
4. {stability_rule}
5. Examples whose target is empty or blank are {empty_rule}.
6. {history_rule}
7. Sample: {sample}{_samples(opts.sample, opts.samples)}. Strata are rank quartiles of the target length (output
   length for output prediction, code length for next cell), ties broken by
   example id; a stratum with too few examples gives all it has.

{strata}

## Determinism ceiling

{_ceiling(sel)}

## Runtime context

The runtime block of this build uses the `{render.runtime_format}` format, at
most {render.max_runtime_chars} characters, each repr cut to
{render.prompt_repr_chars} characters. {_descriptions(render.descriptions)} Its header gives the number of variables,
the kernel's memory and the execution time of the previous cell (the paper's
runtime fields). Formats `themisto build` offers:

- `text`: one entry per variable (name, type, size in bytes, shape/len) and
  its repr;
- `json`: `{{"variables": [...], "not_shown": k}}`, one variable object a line;
- `referenced`: the `text` format restricted to the variables the target
  cell's code refers to (for next cell prediction: the last
  {render.referenced_window} history cells), found with Python's `ast`.

When the variables do not all fit, they are taken in order of importance,
each one that still fits, and the rest are counted: first those the target
cell's code refers to (output prediction; their reprs are cut shorter if even
they do not fit whole), then the most recently changed (the step at which
their type, size, shape, len or repr last changed), never by name. The kept
variables are listed in snapshot order. The block is never empty: a session
without variables says so.
{_showcase(showcase)}
## Fields

Task configs:

- `example_id` (string): `<trajectory_id>/<step>`, the same in both configs of a pair
- `trajectory_id` (string), `step` (int64): the step being predicted
- `history` (list of `{{code, output}}`): earlier executions of the trajectory, oldest first; a kernel
  restart is a cell with code `# --- kernel restarted ---` and empty output
- `history_dropped` (int64): older history cells left out by the context budget
- `code` (string): the target cell's code for output prediction; empty for next cell prediction
- `runtime` (list of variables, fields below): the state before the step; empty in the configs without runtime
- `memory_bytes_before` (int64, nullable): kernel memory before the step; null without runtime and
  after a restart
- `execution_time_before` (float64, nullable): seconds the previous step of the live kernel took; null
  without runtime and after a restart
- `runtime_text` (string): the rendered runtime block; empty without runtime
- `prompt` (string): the full prompt a model sees
- `target` (string): the expected output (output prediction) or code (next cell prediction)
- `target_is_error` (bool): the target step raised an exception
- `stable` (bool, nullable): the target is reproducible across re-executions. Output prediction: the
  step's output was identical in every re-execution (null when unknown). Next cell prediction: always
  true, as the target is code
- `output_kind` (string): the kind of the target step's output, the same in both tasks: `none` (empty),
  `scalar` (one number, bool, quoted string or short word), `collection` (a list, tuple, dict, set or
  array repr), `table` (a pandas DataFrame or Series), `text` (anything else), `error` (an exception),
  `image` (a figure or image only)
- `step_kind` (string): `first_run` (the cell's first execution), `rerun_unchanged` (the cell ran
  before with the same code), `rerun_edited` (it ran before with other code), `after_restart` (the
  first step after a kernel restart, whatever its cell)
- `duplicate_of` (string, nullable): the `example_id` of the first earlier example of the same split and
  trajectory with the same (`code`, `target`) pair, else null; drop the rows where it is set to score
  each distinct question once

`trajectories`, one row per recorded step:

{field_list(STEP_SCHEMA)}

A variable (the items of `runtime`, here and in the task configs):

{field_list(VARIABLE_SCHEMA)}

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


def _type_name(field: SchemaField) -> str:
    """How the card names a field's type: its table type, ``nullable`` where null is allowed."""
    if field.doc.as_json:
        name = "string, JSON"
    elif field.kind is dict:
        name = "object {" + ", ".join(field.doc.keys) + "}"
    elif field.kind is list and field.item is not None:
        item = field.item
        name = f"list of {item.__name__.lower()}s" if is_dataclass(item) else f"list of {VALUE_TYPES[item]}"
    else:
        name = VALUE_TYPES[field.kind]
    return f"{name}, nullable" if field.nullable else name


def field_list(schema: tuple[SchemaField, ...]) -> str:
    """A Markdown list of a schema's columns: name, type and description, derived from the step schema."""
    return "\n".join(f"- `{field.column}` ({_type_name(field)}): {field.doc.description}" for field in schema)


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
