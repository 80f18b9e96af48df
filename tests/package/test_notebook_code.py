"""The package parses notebook code without printing the compiler's warnings about that code, at every site."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A cell with an invalid escape sequence in a string: ``ast.parse`` warns of it (a SyntaxWarning, printed by default,
# from Python 3.12 on; a DeprecationWarning before, printed under ``-W default``).
CELL = 'import re\nwords = re.findall("\\w+", text)\nwords'
# each site, and what it answers for CELL (or for the escape in an expression, a repr): proof that it parsed it
SITES = {
    "the build's referenced names": (
        f"from themisto.building.prompts import referenced_names as site; print(sorted(site({CELL!r})))",
        "['re', 'text', 'words']",
    ),
    "the baselines' displayed name": (
        f"from themisto.evaluation.baselines import displayed_name as site; print(site({CELL!r}))",
        "words",
    ),
    "the state lookup": (
        "from themisto.evaluation.state_lookup import resolve as site; print(site('\"\\\\w+\"', []))",
        "'\\\\w+'",
    ),
    "a repr's fields": (
        "from themisto.evaluation.state_lookup import Shown, _repr_fields as site;"
        " print(site(Shown('Options(pattern=\"\\\\s+\")')))",
        "{'pattern': '\\\\s+'}",
    ),
    "the JuNE import's bound names": (
        f"from themisto.recording.zenodo import _bound_names as site; print(sorted(site({CELL!r})))",
        "['re', 'words']",
    ),
}


@pytest.mark.parametrize("site", sorted(SITES))
def test_a_parse_of_notebook_code_prints_no_warning_about_it(site: str) -> None:
    call, answer = SITES[site]
    # the same code parsed plainly afterwards, in the same process: the warning is shown there (the filter is the
    # notebook code's alone, and the process shows such warnings)
    control = f"import ast; ast.parse({CELL!r})"
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", f"{call}\n{control}"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == answer
    warned = [line for line in done.stderr.splitlines() if "invalid escape sequence" in line]
    assert len(warned) == 1 and warned[0].startswith("<unknown>:2:"), done.stderr
