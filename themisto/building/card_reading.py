"""A build read back through its dataset card: the card's metadata, the options it was built with, its files.

A build names its files after their content (``<config>/<split>-<hash>.parquet``), so
the card is the one place that says which file holds a split. Every stage that reads a
build (evaluation, ``show``, ``publish``, the next build into the same folder) reads it
here, without the card writer's dependencies (``datasets``, ``huggingface_hub``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from themisto.building.prompts import RenderOptions
from themisto.building.selection import SelectionOptions
from themisto.exceptions import InputError, short_message
from themisto.lm_eval_files import task_versions

BUILD_OPTIONS_KEY = "themisto_build"  # card YAML key holding the options of the build
TASKS_KEY = "themisto_tasks"  # card YAML key holding the version of every lm-eval task the build was made for
# build options renamed since cards were first written: old name -> new name
_RENAMED_OPTIONS = {"max_repr_chars": "prompt_repr_chars"}
# The metadata block of a card: a first line ``---``, then YAML up to the next ``---`` line.
_YAML_BLOCK = re.compile(r"---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)


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


def rebuild_hint(folder: str | Path) -> str:
    """The command that makes ``folder`` a build of this Themisto again."""
    return f"rebuild it: themisto build TRAJECTORY_DIR -o {folder}"


def check_build(folder: str | Path) -> None:
    """Refuse a build made for other task versions or with another schema than this Themisto's.

    Every command and function that reads a build calls this (through
    :func:`themisto.evaluation.data.find_data`): a build from before a prompt or scoring change
    (the task YAMLs' ``metadata: version``) would be scored silently under the new version's name.
    One line, naming the rebuild command.
    """
    card = Path(folder) / "README.md"
    meta = read_card_metadata(folder)
    if BUILD_OPTIONS_KEY not in meta:
        raise InputError(f"{card}: not a Themisto build (the dataset card has no {BUILD_OPTIONS_KEY} block)")
    built, current = meta.get(TASKS_KEY), task_versions()
    if not isinstance(built, dict):
        versions = ", ".join(sorted(set(current.values())))
        raise InputError(
            f"{folder}: built by an older Themisto (its card records no task versions; these tasks are version"
            f" {versions}): {rebuild_hint(folder)}"
        )
    changed = [task for task in current if str(built.get(task)) != current[task]]
    if changed:
        task = changed[0]
        raise InputError(
            f"{folder}: built for {task} version {built.get(task)}, this Themisto's is {current[task]}"
            f"{f' (and {len(changed) - 1} more tasks)' if len(changed) > 1 else ''}: {rebuild_hint(folder)}"
        )
    _check_schema(folder, meta)


def _check_schema(folder: str | Path, meta: dict[str, Any]) -> None:
    """Refuse a build whose card lists other columns (names and types) for a config than this Themisto writes."""
    from themisto.building.tables import config_features

    try:
        infos = {str(info["config_name"]): info["features"] for info in meta["dataset_info"]}
    except (KeyError, TypeError):
        raise InputError(f"{folder}: the dataset card lists no features: {rebuild_hint(folder)}") from None
    for config, features in infos.items():
        expected = config_features(config)._to_yaml_list()
        if features != expected:
            theirs = {str(entry.get("name")) for entry in features if isinstance(entry, dict)}
            ours = {str(entry["name"]) for entry in expected}
            differ = sorted(theirs ^ ours) or ["a column's type"]
            raise InputError(
                f"{folder}: config {config} has another schema than this Themisto's (differs in"
                f" {', '.join(differ[:3])}): {rebuild_hint(folder)}"
            )


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
    """The data files a build's card names: ``(config, split) -> path`` relative to ``folder``."""
    return named_files(read_card_metadata(folder), Path(folder) / "README.md")


def parquet_path(folder: str | Path, config: str, split: str) -> Path:
    """The Parquet file of one split of one config of a build, as the build's dataset card names it."""
    files = read_data_files(folder)
    if (config, split) not in files:
        raise InputError(f"{folder}: the dataset card names no file for config {config!r}, split {split!r}")
    return Path(folder) / files[config, split]
