"""Publish a build to the Hugging Face Hub: checked first, then uploaded in one commit.

A build is complete when its card names every config of the dataset contract
with its splits, and every file it names lies inside the build folder, opens
as Parquet and holds the rows the card's ``dataset_info`` says. Only the card
and those files go up (nothing else in the folder, e.g. a stray secret), as
one ``create_commit`` of ``CommitOperationAdd`` operations, so a reader of the
repository never sees half a build. The token comes from the ``HF_TOKEN``
environment variable only and never appears in a message.

After publishing, ``load_dataset("<org>/<name>", "output_prediction_runtime")``
works from anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto.building.card import HUB_PLACEHOLDER
from themisto.building.card_reading import named_files, read_build_options, read_card_metadata
from themisto.building.tables import config_splits
from themisto.exceptions import InputError, ThemistoError, short_message
from themisto.vocabulary import CONFIG_NAMES

if TYPE_CHECKING:
    from huggingface_hub import CommitOperationAdd

TOKEN_ENV = "HF_TOKEN"
CARD = "README.md"


@dataclass(frozen=True)
class BuildFile:
    """One file of a build: where it goes in the repository, where it is, and its size."""

    path_in_repo: str
    local: Path
    size: int
    rows: int | None  # Parquet rows; None for the card


def check_repo_id(repo_id: str) -> None:
    """Raise :class:`InputError` unless ``repo_id`` is a valid ``owner/name`` Hub id."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if repo_id.count("/") != 1:
        raise InputError(f"{repo_id!r}: a Hub dataset id is OWNER/NAME, e.g. my-org/themisto")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise InputError(f"{repo_id!r} is not a valid Hub id: {short_message(exc)}") from None


def build_files(folder: str | Path) -> list[BuildFile]:
    """The card and every data file of a complete build, checked; raises :class:`InputError` otherwise."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder).resolve()
    _refuse_links(folder)
    meta = read_card_metadata(folder)
    read_build_options(folder)  # a Themisto card, not any dataset card
    named = named_files(meta, folder / CARD)
    expected = [(config, split) for config in CONFIG_NAMES for split in config_splits(config)]
    missing = sorted(f"{config}/{split}" for config, split in expected if (config, split) not in named)
    if missing:
        raise InputError(f"{folder}: incomplete build, the card names no file for {', '.join(missing)}")
    sizes = _split_sizes(meta)
    files = [BuildFile(CARD, folder / CARD, (folder / CARD).stat().st_size, None)]
    for (config, split), relative in named.items():
        path = (folder / relative).resolve()
        if not path.is_relative_to(folder):
            raise InputError(f"{folder / CARD}: {relative!r} lies outside the build folder")
        if not path.is_file():
            raise InputError(f"{path}: missing; the build is incomplete (run `themisto build` again)")
        try:
            rows = pq.read_table(path).num_rows  # every page read: a torn file fails here, not on the Hub
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"{path}: not a readable Parquet file ({short_message(exc)})") from None
        if sizes.get((config, split), rows) != rows:
            raise InputError(
                f"{path}: {rows} rows, but the card says {sizes[config, split]}; the card is stale (build again)"
            )
        files.append(BuildFile(relative, path, path.stat().st_size, rows))
    return files


def _refuse_links(folder: Path) -> None:
    """Raise :class:`InputError` for a symbolic link anywhere in the build, the card included.

    A link would upload whatever it points to (a file outside the build, a secret) under a build
    file's name; a build written by ``themisto build`` holds none.
    """
    for root, folders, names in os.walk(folder):  # links to folders are listed, never followed
        for name in [*folders, *names]:
            path = Path(root) / name
            if path.is_symlink():
                raise InputError(f"{path}: a symbolic link in the build; publish uploads plain files only")


def _split_sizes(meta: dict[str, Any]) -> dict[tuple[str, str], int]:
    """``(config, split) -> rows`` from the card's ``dataset_info`` (empty when it has none)."""
    infos = meta.get("dataset_info") or []
    infos = [infos] if isinstance(infos, dict) else infos
    try:
        return {
            (str(info["config_name"]), str(split["name"])): int(split["num_examples"])
            for info in infos
            for split in info.get("splits", [])
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InputError("the card's dataset_info block is malformed") from None


def commit_operations(files: list[BuildFile], repo_id: str) -> list[CommitOperationAdd]:
    """One ``CommitOperationAdd`` per file, at the same path in the repository as in the build.

    The card goes up with ``repo_id`` in its usage snippet, so the Hub page shows the line that loads it.
    """
    from huggingface_hub import CommitOperationAdd

    operations = []
    for file in files:
        content: str | bytes = str(file.local)
        if file.path_in_repo == CARD:
            text = file.local.read_text(encoding="utf-8")
            content = text.replace(f'"{HUB_PLACEHOLDER}"', f'"{repo_id}"').encode("utf-8")
        operations.append(CommitOperationAdd(path_in_repo=file.path_in_repo, path_or_fileobj=content))
    return operations


def commit_message(files: list[BuildFile]) -> str:
    """The summary line of the publishing commit."""
    from themisto import __version__

    return f"Themisto build: {len(files)} files (themisto {__version__})"


def publish(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> str:
    """Check the build in ``folder``, then :func:`upload` it; returns the commit URL."""
    check_repo_id(repo_id)
    return upload(build_files(folder), repo_id, private=private, revision=revision, token=token)


def upload(
    files: list[BuildFile],
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> str:
    """Create the dataset repository if needed and commit ``files`` to it at once; returns the commit URL.

    ``token`` defaults to ``$HF_TOKEN``; no other source (such as a cached login) is used.
    """
    token = token or os.environ.get(TOKEN_ENV)
    if not token:
        raise InputError(f"set {TOKEN_ENV} to a Hugging Face token with write access to {repo_id}")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    description = "\n".join(f"- {f.path_in_repo}: {f.rows} rows" for f in files if f.rows is not None)
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, repo_type="dataset", exist_ok=True)
        info = api.create_commit(
            repo_id,
            commit_operations(files, repo_id),
            commit_message=commit_message(files),
            commit_description=description,
            repo_type="dataset",
            revision=revision,
        )
    except Exception as exc:  # HTTP, network and validation errors of huggingface_hub alike
        message = short_message(exc).replace(token, "<HF_TOKEN>")  # never echo the token
        raise ThemistoError(f"publishing to {repo_id} failed: {message}") from None
    return str(info.commit_url)
