"""The dataset card of a build: YAML metadata the Hub and ``load_dataset`` read, then prose for a reader.

The prose is ``card_template.md``; :mod:`themisto.building.card_reading` reads a card back.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
from datasets.info import DatasetInfosDict

from themisto.building.card_reading import BUILD_OPTIONS_KEY, TASKS_KEY
from themisto.building.selection import Selection
from themisto.building.summary import BuildSummary
from themisto.building.tables import VALUE_TYPES, config_features, config_splits
from themisto.exceptions import InputError
from themisto.lm_eval_files import task_versions
from themisto.recording.fidelity import FIDELITY_NORMALISATIONS, Fidelity
from themisto.trajectory import STEP_SCHEMA, VARIABLE_SCHEMA, SchemaField
from themisto.vocabulary import (
    BPB_GROUP,
    BPB_TASKS,
    CONFIG_NAMES,
    DEFAULT_CONFIG,
    GROUP_TASKS,
    LM_EVAL_GROUP,
    OUTPUT_PREDICTION,
    PLACEBO_TASKS,
    RUNTIME_SUFFIX,
    SPLITS,
)

ARXIV_ID = "2504.12365"  # the paper; an ``arxiv:`` tag makes the Hub link the dataset to it
ZENODO_RECORD = "https://zenodo.org/records/14861889"
# The repository id in the card's usage snippet until `themisto publish` puts the real one there.
HUB_PLACEHOLDER = "<org>/themisto"
CARD_TEMPLATE = "card_template.md"  # the card's prose, beside this module

# The license identifiers the Hub accepts in a card's ``license:`` field. huggingface_hub ships no such
# list, so the Hub's published one is shipped as data, its source named in the file.
HUB_LICENSES_FILE = "hub_licenses.txt"


def hub_licenses() -> frozenset[str]:
    """The Hub's license identifiers, from the shipped copy of its published list."""
    text = resources.files("themisto.building").joinpath(HUB_LICENSES_FILE).read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


# The paper as arXiv exports it; the task README (lm_eval_tasks/themisto/README.md) cites the same entry.
CITATION = """@misc{grotov2025themisto,
  title         = {Themisto: Jupyter-Based Runtime Benchmark},
  author        = {Konstantin Grotov and Sergey Titov},
  year          = {2025},
  eprint        = {2504.12365},
  archivePrefix = {arXiv},
  primaryClass  = {cs.SE},
  url           = {https://arxiv.org/abs/2504.12365}
}"""


def check_license(license_id: str) -> None:
    """Raise :class:`InputError` unless ``license_id`` is one of the Hub's license identifiers."""
    if license_id not in hub_licenses():
        raise InputError(
            f"license {license_id!r} is not a Hugging Face Hub license identifier (e.g. apache-2.0, cc-by-4.0, "
            "mit; 'other' for any other license)"
        )


def _size_category(rows: int) -> str:
    """The Hub's size category of ``rows`` examples, from the list ``datasets`` ships (``n<1K``, ``1K<n<10K``, ...)."""
    categories = json.loads(
        resources.files("datasets.utils.resources").joinpath("size_categories.json").read_text(encoding="utf-8")
    )
    powers = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
    for category in categories:
        bound = re.fullmatch(r"(?:\w+<)?n<(\d+)([KMBT])", category)  # n<1K, 1K<n<10K, ...; not unknown or n>1T
        if bound and rows < int(bound[1]) * powers[bound[2]]:
            return str(category)
    return str(categories[-1])  # n>1T


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
    )  # the license of data imported from the Zenodo record: the card's License section
    # the options of this build, so `read_build_options` can rebuild it byte for byte
    card_data[BUILD_OPTIONS_KEY] = {**asdict(summary.selection_options), **asdict(summary.render_options)}
    card_data[TASKS_KEY] = task_versions()  # what every reader checks (card_reading.check_build)
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


def _fidelity(found: Fidelity) -> str:
    """The card's sentence on how far the recording reproduces the outputs its sources stored."""
    unknown = f"{found.unknown} steps have no stored output to compare (unknown, counted neither way)"
    if not found.steps:
        return f"Replay fidelity: none of the steps has a stored output of its source to compare; {unknown}."
    normalised = ", ".join(name for name, _ in FIDELITY_NORMALISATIONS)
    return (
        f"Replay fidelity: of the {found.steps} steps whose source stored an output, {found.exact} reproduce it"
        f" exactly and {found.norm} after normalisation ({normalised}); {unknown}."
    )


def _invented_errors(count: int, kept: bool) -> str:
    """The card's clause on the errors a replay raised where the source's stored output shows none."""
    if not count:
        return ""
    return (
        f"; {count} of them are errors the replay raised where the source's stored output shows none (an error"
        " of the replay, not of the author's session), "
        + (
            "kept too (`--include-invented-errors`)"
            if kept
            else "never targets (`--include-invented-errors` keeps them)"
        )
    )


def _descriptions(described: bool) -> str:
    """The card's sentence on the variables' structured descriptions."""
    if not described:
        return "Variables are shown without their structured descriptions (`--no-descriptions`)."
    return (
        "Each variable shows its structured description where it has one (a frame's columns with their dtypes"
        " and its index, a series' name, dtype and index, an array's dtype and range, a container's item"
        " types), kept whole for the variables the target cell reads."
    )


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
    files = _file_list(summary.trajectory_files)
    sample = (
        f"`paper`: 10 examples from the first target-length quartile, 180 from the second and third, "
        f"10 from the fourth (seed {opts.seed})"
        if opts.sample == "paper"
        else "`all`: the `test` split holds every eligible example"
    )
    errors_rule = "kept (`--include-errors`); `target_is_error` marks them" if opts.include_errors else "dropped"
    errors_rule += _invented_errors(sel.invented_errors, opts.include_errors and opts.include_invented_errors)
    images_rule = (
        "kept (`--include-images`)"
        if opts.include_images
        else "dropped from output prediction (their target is a placeholder such as `<image/png>`"
        + (
            ", or a figure's text `<Figure size ...>`, `--keep-figure-text` keeps those"
            if opts.figure_text_as_image
            else ""
        )
        + f"; so are the {sel.plot_objects} outputs that show an image beside the plot objects drawn, such as"
        " `<Axes: ...>` or a seaborn `FacetGrid`); they stay in next cell prediction"
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
    values = {
        "metadata": card_metadata(summary, license_id, folder),
        "hub_id": HUB_PLACEHOLDER,
        "count_rows": count_rows,
        "source_data": _source_data(summary),
        "sessions_and_trajectories": _sessions_and_trajectories(summary),
        "trajectories": sel.trajectories,
        "steps": sel.steps,
        "errors": sel.errors,
        "fidelity": _fidelity(sel.fidelity),
        "files": files,
        "history_budget": _history_budget(opts.max_context_chars),
        "masking": _masking(opts.mask_machine_text),
        "samples_rule": _samples(opts.sample, opts.samples),
        "descriptions": _descriptions(render.descriptions),
        "max_code_chars": f"{sel.max_code_chars:g}",
        "max_output_chars": f"{sel.max_output_chars:g}",
        "quantile": f"{opts.quantile:g}",
        "errors_rule": errors_rule,
        "images_rule": images_rule,
        "stability_rule": stability_rule,
        "empty_rule": empty_rule,
        "history_rule": history_rule,
        "sample": sample,
        "strata": strata,
        "ceiling": _ceiling(sel),
        "runtime_format": render.runtime_format,
        "max_runtime_chars": render.max_runtime_chars,
        "prompt_repr_chars": render.prompt_repr_chars,
        "referenced_window": render.referenced_window,
        "showcase": _showcase(showcase),
        "step_fields": field_list(STEP_SCHEMA),
        "variable_fields": field_list(VARIABLE_SCHEMA),
        "citation": CITATION,
        "license_id": license_id,
        "zenodo_record": ZENODO_RECORD,
        "options_key": BUILD_OPTIONS_KEY,
        "tasks": _task_list(),
        "tasks_key": TASKS_KEY,
        "instance": _instance(folder, summary.files, showcase),
    }
    # the prose is a file of its own, so it reads as the card does; $name fills in this build's facts
    template = resources.files("themisto.building").joinpath(CARD_TEMPLATE).read_text(encoding="utf-8")
    return string.Template(template).substitute(values)


def _source_data(summary: BuildSummary) -> str:
    """Where this build's trajectories come from, as their provenance files say."""
    known = sorted({name for name in summary.sources if name is not None})
    unknown = sum(1 for name in summary.sources if name is None)
    if not known:
        return (
            f"The {len(summary.sources)} trajectories of this build carry no provenance file, so the card cannot "
            "say what they were recorded from."
        )
    kinds = sorted({f"`{Path(name).suffix}`" if Path(name).suffix else "no suffix" for name in known})
    text = (
        f"The trajectories of this build were recorded from {len(known)} source files ({', '.join(kinds)}), as "
        "their provenance files (`*.provenance.json`, beside each trajectory) say"
    )
    text += f"; {unknown} carry no provenance file." if unknown else "."
    if summary.attributions:
        text += "\n\nLicences and attribution of the sources:\n\n" + "\n\n".join(summary.attributions)
    return text + _author_versions(summary)


# A source folder's licence and attribution, quoted in the card of every build recorded from it.
ATTRIBUTION_FILE = "ATTRIBUTION.md"
_ATTRIBUTION_CHARS = 4000  # a provenance file may name any folder: a note longer than this is not quoted


def source_notes(trajectories: Sequence[Path]) -> tuple[list[str], dict[str, int]]:
    """The :data:`ATTRIBUTION_FILE` notes beside the trajectories' sources (each once, in order), and per
    Python version a source notebook's author ran other than the recording kernel's, its trajectories."""
    from themisto.building.history import AUTHOR_PYTHON, kernel_environment
    from themisto.provenance import read_provenance

    notes: dict[Path, str] = {}
    authors: Counter[str] = Counter()
    for path in trajectories:
        try:
            provenance = read_provenance(path)
            author = dict(kernel_environment(path)).get(AUTHOR_PYTHON)
        except InputError:  # a damaged provenance file: nothing to say of its source
            continue
        authors.update([author] if author else [])
        folder = provenance.source.path.parent if provenance is not None and provenance.source.path else None
        note = folder / ATTRIBUTION_FILE if folder is not None else None
        if note is not None and note not in notes and note.is_file() and note.stat().st_size <= _ATTRIBUTION_CHARS:
            notes[note] = note.read_text(encoding="utf-8", errors="replace").strip()
    return list(notes.values()), dict(sorted(authors.items()))


def _author_versions(summary: BuildSummary) -> str:
    """The card's sentence on trajectories re-recorded under another Python than their notebook's author's."""
    if not summary.author_pythons:
        return ""
    counts = ", ".join(f"Python {version}: {count}" for version, count in summary.author_pythons.items())
    return (
        f"\n\n{sum(summary.author_pythons.values())} trajectories re-execute notebooks whose authors ran another"
        f" Python than the recording kernel ({counts}): their histories and targets are the outputs of the"
        " versions the prompts name, not the notebooks' own, and both prompts of a pair say so."
    )


def _sessions_and_trajectories(summary: BuildSummary) -> str:
    """The count of sessions (source files) against the count of trajectories (kernels)."""
    sessions = len({name for name in summary.sources if name is not None})
    trajectories = len(summary.sources)
    if not sessions:
        return "the sessions of this build are unknown"
    return f"the {sessions} sessions of this build gave {trajectories} trajectories (one per kernel)"


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


def _file_list(names: list[str]) -> str:
    """The trajectory files of a build, summarised: how many, and the first and last name."""
    if len(names) <= 3:
        return ", ".join(f"`{name}`" for name in names) or "no files"
    ordered = sorted(names)
    return f"{len(names)} JSONL files (`{ordered[0]}` to `{ordered[-1]}`)"


def _task_list() -> str:
    """The lm-eval tasks by group, as the task folder groups them, each with the config it reads."""

    def names(tasks: dict[str, str]) -> str:
        return ", ".join(f"`{task}` (`{config}`)" for task, config in tasks.items())

    return (
        f"- group `{LM_EVAL_GROUP}`, generated answers scored by exact match, ROUGE-L and chrF:"
        f" {names(GROUP_TASKS)};\n"
        f"- the placebo arms of the same, in no group (name them): {names(PLACEBO_TASKS)};\n"
        f"- group `{BPB_GROUP}`, bits per byte of the target under each prompt: {names(BPB_TASKS)}."
    )


# The fields a data-instance example leaves out or cuts: the prompt repeats the history and the block.
_INSTANCE_HISTORY = 2  # history cells shown
_INSTANCE_CHARS = 160  # characters of a long text field shown


def _instance(folder: Path, files: dict[str, dict[str, str]], showcase: dict[str, Any] | None) -> str:
    """One row of ``output_prediction_runtime`` (the showcased example), long fields cut, as JSON."""
    if showcase is None:
        return "This build has no example to show."
    config = OUTPUT_PREDICTION + RUNTIME_SUFFIX
    table = pq.read_table(folder / files[config]["test"], filters=[("example_id", "=", showcase["example_id"])])
    row = table.slice(0, 1).to_pylist()[0]
    shown: dict[str, Any] = {}
    for name, value in row.items():
        if name == "history":
            earlier = len(value) - _INSTANCE_HISTORY
            value = ([f"... {earlier} earlier cells"] if earlier > 0 else []) + value[-_INSTANCE_HISTORY:]
        elif name == "runtime":
            value = [{**variable, "repr": _cut(variable["repr"])} for variable in value[:2]]
            value += [f"... {len(row['runtime']) - 2} more variables"] if len(row["runtime"]) > 2 else []
        elif isinstance(value, str):
            value = _cut(value)
        shown[name] = value
    text = json.dumps(shown, indent=2, ensure_ascii=False, default=str)
    return (
        f"A row of `{config}` (`test`), long strings cut to {_INSTANCE_CHARS} characters (`...`), the history"
        f" to its last {_INSTANCE_HISTORY} cells and the runtime to its first two variables:\n\n"
        f"```json\n{text}\n```"
    )


def _cut(text: str) -> str:
    """``text`` up to :data:`_INSTANCE_CHARS` characters, marked where cut."""
    return text if len(text) <= _INSTANCE_CHARS else text[:_INSTANCE_CHARS] + "..."


def _showcase(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    fence_marks = "`" * 4  # the block itself may contain triple backticks
    return (
        f"\nThe runtime block of example `{row['example_id']}` (`output_prediction_runtime`, `test`); "
        f"`themisto show output_prediction {row['example_id']}` prints both prompts of the pair:\n\n"
        f"{fence_marks}text\n{row['runtime_text'].rstrip()}\n{fence_marks}\n"
    )
