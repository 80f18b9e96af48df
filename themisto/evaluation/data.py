"""Where a build is found and how a task config is loaded from it, always from the files on disk.

Data location, in order of precedence: the ``data`` argument, the
``THEMISTO_DATA`` environment variable (a built dataset folder or a Hub id),
then the default build that ships with the package (``hf_dataset/`` next to
the package in a checkout, ``themisto/hf_dataset/`` in an installed wheel).
The task files are found the same way, so nothing depends on the cwd.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto.exceptions import InputError, OptionError, short_message
from themisto.vocabulary import DATA_ENV, SPLITS

if TYPE_CHECKING:
    import datasets

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def bundled_path(name: str) -> Path:
    """A top-level resource folder (``lm_eval_tasks``, ``hf_dataset``) of this installation.

    A wheel carries it inside the package (see setup.py); a source checkout or
    an editable install keeps it at the repository root, next to the package.
    """
    inside = _PACKAGE_DIR / name
    return inside if inside.is_dir() else _PACKAGE_DIR.parent / name


def tasks_path() -> Path:
    """The folder holding the Themisto lm-eval task YAMLs (pass it to ``--include_path``)."""
    return bundled_path("lm_eval_tasks") / "themisto"


def data_location(data: str | None = None) -> str:
    """The dataset to evaluate on: ``data``, else ``$THEMISTO_DATA``, else the bundled build."""
    chosen = data or os.environ.get(DATA_ENV) or str(bundled_path("hf_dataset"))
    path = Path(chosen).expanduser()
    if path.exists():
        if not (path / "README.md").is_file():
            raise InputError(f"{chosen}: not a built Themisto dataset (no README.md dataset card)")
        return str(path.resolve())
    if _looks_like_hub_id(chosen):
        return chosen
    raise OptionError("{chosen}: dataset folder not found (set {env} or give {data})", chosen=chosen, env=DATA_ENV)


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
    themisto_split: str = "test",
    **_metadata: Any,
) -> dict[str, datasets.Dataset]:
    """The ``custom_dataset`` loader of the task YAMLs: one config, exposed as lm-eval's ``test`` split.

    ``_metadata`` swallows the rest of the task metadata lm-eval passes along
    (``version``, model arguments); ``themisto_split`` lets ``full`` (every
    eligible example) stand in for the 200-example ``test`` sample.
    """
    import datasets

    check_split(themisto_split)
    location = data_location(themisto_data)
    try:
        dataset = datasets.load_dataset(location, themisto_config, split=themisto_split)
    except (ValueError, OSError) as exc:  # OSError: missing files, or the Hub unreachable
        raise InputError(f"{location}: cannot load config {themisto_config!r}: {short_message(exc)}") from exc
    if len(dataset) == 0:
        raise InputError(f"{location}: config {themisto_config!r} split {themisto_split!r} is empty")
    return {"test": dataset}
