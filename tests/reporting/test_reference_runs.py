"""The README's real-model tables are what ``themisto report`` says of the committed runs in data/reference_runs/."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from test_report import _section, _table

from themisto.cli import main

pytestmark = pytest.mark.slow  # two reports with the bootstrap

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "data" / "reference_runs"
README_SECTION = "Two real models on both corpora"
CORPORA = ("bundled", "real")
BPB_SECTION = "Bits per byte: runtime vs plain and placebo"
MODELS_SECTION = "Models compared"


def _report(corpus: str) -> str:
    """``themisto report`` of one corpus's committed runs (exit 0)."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(RUNS / corpus)]) == 0
    return stdout.getvalue()


@pytest.fixture(scope="module")
def reports() -> dict[str, str]:
    """The report of each corpus's committed runs."""
    return {corpus: _report(corpus) for corpus in CORPORA}


@pytest.fixture(scope="module")
def readme() -> str:
    """The README's section on the reference runs."""
    return _section((ROOT / "README.md").read_text(encoding="utf-8"), README_SECTION)


def _matches(
    readme_rows: list[dict[str, str]], report_rows: dict[str, list[dict[str, str]]], key: tuple[str, ...]
) -> int:
    """Check every README row against the report row of its corpus with the same key cells; the rows checked."""
    for row in readme_rows:
        found = [r for r in report_rows[row["corpus"]] if all(r[name] == row[name] for name in key)]
        assert len(found) == 1, f"no single report row for {row}"
        shared = set(row) - {"corpus"}
        assert {name: found[0][name] for name in shared} == {name: row[name] for name in shared}
    return len(readme_rows)


def test_the_readme_bits_per_byte_table_is_the_reports(readme: str, reports: dict[str, str]) -> None:
    rows = {corpus: _table(_section(text, BPB_SECTION), "model") for corpus, text in reports.items()}
    table = _table(readme, "corpus")
    # both corpora, both models, both tasks, both differences
    assert {(r["corpus"], r["model"], r["task"], r["Δ"]) for r in table} == {
        (corpus, r["model"], r["task"], r["Δ"]) for corpus, found in rows.items() for r in found
    }
    assert len({r["model"] for r in table}) == 2
    assert _matches(table, rows, ("model", "task", "Δ")) == 16


def test_the_readme_model_comparison_is_the_reports(readme: str, reports: dict[str, str]) -> None:
    rows = {corpus: _table(_section(text, MODELS_SECTION), "task") for corpus, text in reports.items()}
    comparison = readme.split("Models compared", 1)[1]
    table = _table(comparison, "corpus")
    assert {r["corpus"] for r in table} == set(CORPORA)
    assert _matches(table, rows, ("task", "metric", "model A", "model B")) == 12
