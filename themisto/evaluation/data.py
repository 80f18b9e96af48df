"""Where a build is found and how a task config is loaded from it, always from the files on disk.

One rule finds the build for every command and for the lm-eval tasks
(:func:`find_data`), first match wins:

1. the ``data`` argument (``--data`` on the command line): a build folder or a Hub id;
2. the ``THEMISTO_DATA`` environment variable: the same;
3. ``./hf_dataset`` when the working directory has one (where ``themisto build`` writes by default);
4. the build that ships with the package (``hf_dataset/`` next to the package in a checkout,
   ``themisto/hf_dataset/`` in an installed wheel).

The task files are found through the package too, so nothing depends on the cwd.

A local build is read straight from the Parquet files its dataset card names,
with no cache in between, so an evaluation always scores the files on disk
(``datasets.load_dataset`` caches a local folder under its name and its card's
``configs`` block, which once served a rebuild the rows of the previous build).
A Hub id goes through ``load_dataset``, whose cache is keyed by the commit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto.exceptions import InputError, OptionError, short_message
from themisto.lm_eval_files import bundled_path as bundled_path
from themisto.lm_eval_files import tasks_path as tasks_path  # where callers find it, beside the build rule
from themisto.vocabulary import DATA_ENV, DEFAULT_SPLIT, SPLITS

if TYPE_CHECKING:
    import datasets

# How a build was chosen, in the order find_data tries them.
GIVEN = "given"
FROM_ENV = f"${DATA_ENV}"
FROM_CWD = "./hf_dataset"
BUNDLED = "the bundled build"
DEFAULT_BUILD = "hf_dataset"  # the folder name of a build in the working directory


@dataclass(frozen=True)
class DataLocation:
    """A build to read: a resolved folder or a Hub id, and which rule chose it."""

    location: str
    source: str  # GIVEN, FROM_ENV, FROM_CWD or BUNDLED

    @property
    def is_local(self) -> bool:
        """Whether the build is a folder on this machine (else a Hub id)."""
        return Path(self.location).is_absolute()


def find_data(data: str | None = None, *, local: bool = False) -> DataLocation:
    """The build to read: ``data``, else ``$THEMISTO_DATA``, else ``./hf_dataset``, else the bundled build.

    A folder must hold a readable dataset card (``README.md`` with a YAML block) of a build made
    for this Themisto's task versions and schema (:func:`~themisto.building.card_reading.check_build`),
    so a broken or old build fails here in one line rather than being scored. ``local``: a Hub
    id is refused (for commands that read the files themselves).
    """
    if data:
        chosen, source = data, GIVEN
    elif os.environ.get(DATA_ENV):
        chosen, source = os.environ[DATA_ENV], FROM_ENV
    elif Path(DEFAULT_BUILD).is_dir():
        chosen, source = DEFAULT_BUILD, FROM_CWD
    else:
        chosen, source = str(bundled_path(DEFAULT_BUILD)), BUNDLED
    named = chosen if source == GIVEN else f"{chosen} (from {source})"
    path = Path(chosen).expanduser()
    if path.exists():
        if not (path / "README.md").is_file():
            raise InputError(f"{named}: not a built Themisto dataset (no README.md dataset card)")
        from themisto.building.card_reading import check_build

        check_build(path)  # made for these tasks and this schema, or one line naming the rebuild
        return DataLocation(str(path.resolve()), source)
    if _looks_like_hub_id(chosen):
        if local:
            raise InputError(f"{named} is a Hub id; this needs a build folder on this machine")
        return DataLocation(chosen, source)
    raise OptionError("{named}: dataset folder not found (set {env} or give {data})", named=named, env=DATA_ENV)


def data_location(data: str | None = None) -> str:
    """The folder or Hub id :func:`find_data` chooses."""
    return find_data(data).location


def _looks_like_hub_id(name: str) -> bool:
    """``org/name`` with no further path parts: what ``load_dataset`` resolves on the Hub."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~"))


def check_split(split: str) -> None:
    """Reject a split the dataset contract does not define."""
    if split not in SPLITS:
        raise InputError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")


def load_task_dataset(
    themisto_config: str,
    themisto_data: str | None = None,
    themisto_split: str = DEFAULT_SPLIT,
    **_metadata: Any,
) -> dict[str, datasets.Dataset]:
    """The ``custom_dataset`` loader of the task YAMLs: one config, exposed as lm-eval's ``test`` split.

    ``_metadata`` swallows the rest of the task metadata lm-eval passes along
    (``version``, model arguments); ``themisto_split`` lets ``full`` (every
    eligible example) stand in for the 200-example ``test`` sample.
    """
    import datasets

    check_split(themisto_split)
    found = find_data(themisto_data)
    location = found.location
    try:
        if found.is_local:
            dataset = _read_local(location, themisto_config, themisto_split)
        else:
            dataset = datasets.load_dataset(location, themisto_config, split=themisto_split)
    except (ValueError, OSError, InputError) as exc:  # OSError: missing files, or the Hub unreachable
        raise InputError(f"{location}: cannot load config {themisto_config!r}: {short_message(exc)}") from exc
    if len(dataset) == 0:
        raise InputError(f"{location}: config {themisto_config!r} split {themisto_split!r} is empty")
    return {"test": dataset}


def _read_local(folder: str, config: str, split: str) -> datasets.Dataset:
    """One split of a local build, read from the Parquet file its card names; its features come with it."""
    import datasets
    import pyarrow.parquet as pq

    from themisto.building.card_reading import parquet_path

    # the schema carries the features as metadata (Features.arrow_schema), which Dataset restores
    return datasets.Dataset(pq.read_table(parquet_path(folder, config, split)))
