"""The committed build's dataset card: what a Hub visitor reads first, and every repository path it names exists."""

from __future__ import annotations

import re

from repository import REPOSITORY

from themisto.vocabulary import BPB_GROUP, BPB_TASKS, GROUP_TASKS, LM_EVAL_GROUP, PLACEBO_TASKS

CARD = REPOSITORY / "hf_dataset" / "README.md"
# A file name ends in one of these; a token without one names a path only if it starts at a top-level entry.
FILE_SUFFIXES = (".py", ".md", ".json", ".jsonl", ".parquet", ".yaml", ".csv", ".ipynb", ".txt")
# Files the card names that a command writes (they are not committed), with the command it names for them.
WRITTEN_BY = {"runs/report.md": "make run"}


def prose() -> str:
    """The card after its YAML block."""
    return CARD.read_text(encoding="utf-8").split("\n---\n", 1)[1]


def named_paths(text: str) -> set[str]:
    """Every `code` token or link target of ``text`` that is a path in the repository, by its form."""
    tokens = set(re.findall(r"`([^`\s]+)`", text)) | set(re.findall(r"\]\(([^)#\s]+)\)", text))
    top_level = {path.name for path in REPOSITORY.iterdir()}
    paths = set()
    for token in tokens:
        if "<" in token or "://" in token or not re.fullmatch(r"[\w.-]+(/[\w.-]+)*/?", token):
            continue
        if "/" in token and (token.split("/", 1)[0] in top_level or token.endswith(FILE_SUFFIXES)):
            paths.add(token)
    return paths


def test_every_path_the_card_names_exists() -> None:
    text = prose()
    paths = named_paths(text)
    assert "tools/corpus/make_logs.py" in paths and "hf_dataset/" in paths  # the rule finds the card's paths
    missing = [path for path in sorted(paths) if path not in WRITTEN_BY and not (REPOSITORY / path).exists()]
    assert missing == []
    for path, command in WRITTEN_BY.items():
        assert path in paths and command in text


def test_the_rule_would_catch_a_moved_file() -> None:
    assert named_paths("made by `data/make_logs.py`, see [the guide](docs/nothing.md)") == {
        "data/make_logs.py",
        "docs/nothing.md",
    }


def test_the_first_lines_say_the_bundled_build_is_simulated() -> None:
    first = "\n".join(line for line in prose().splitlines()[:8] if line.strip())
    assert "# Themisto" in first and "**The bundled build is simulated.**" in first


def test_the_card_lists_the_groups_as_the_task_folder_has_them_and_has_the_sections_of_a_benchmark_card() -> None:
    text = prose()
    evaluate = text.split("\n## Evaluate\n", 1)[1].split("\n## ", 1)[0]
    lines = {line.split(",", 1)[0]: line for line in evaluate.splitlines() if line.startswith("- ")}
    generative = lines[f"- group `{LM_EVAL_GROUP}`"]
    assert all(f"`{task}`" in generative for task in GROUP_TASKS)
    assert not any(f"`{task}`" in generative for task in [*PLACEBO_TASKS, *BPB_TASKS])
    assert all(f"`{task}`" in lines[f"- group `{BPB_GROUP}`"] for task in BPB_TASKS)
    for section in ("## Data instance", "## Limitations", "## Curators"):
        assert f"\n{section}\n" in text
    instance = text.split("\n## Data instance\n", 1)[1].split("\n## ", 1)[0]
    assert '"example_id": "' in instance and '"target": "' in instance
    built = text.split("\n## How it was built\n", 1)[1].split("\n## ", 1)[0]
    assert built.count(".jsonl") <= 2  # the trajectory files summarised, not listed
