"""Fast start: ``themisto --help`` and every subcommand's ``--help`` import none of the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys

from repository import REPOSITORY

from themisto.cli import SUBCOMMANDS

HEAVY: tuple[str, ...] = (
    "numpy",
    "pandas",
    "pyarrow",
    "datasets",
    "lm_eval",
    "rapidfuzz",
    "transformers",
    "scipy",
    "matplotlib",
)
HEAVY += ("torch", "sklearn", "sacrebleu")

# In a fresh interpreter: print every help text, then list the heavy modules that got imported.
PROBE = """
import contextlib, io, json, sys
from themisto.cli import main
commands = json.loads(sys.argv[1])
helps = {}
for argv in [["--help"]] + [[name, "--help"] for name in commands]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit as exit:
            assert exit.code == 0, argv
    helps[" ".join(argv)] = out.getvalue()
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps({"helps": helps, "heavy": heavy}))
"""


def test_help_of_every_subcommand_imports_no_heavy_library() -> None:
    names = [name.replace("_", "-") for name in SUBCOMMANDS]
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(names), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        check=True,
    )
    report = json.loads(result.stdout)
    assert report["heavy"] == []
    # the probe did print every help: each subcommand's usage line names it
    assert set(report["helps"]) == {"--help", *(f"{name} --help" for name in names)}
    for name in names:
        assert report["helps"][f"{name} --help"].startswith(f"usage: themisto {name} ")
