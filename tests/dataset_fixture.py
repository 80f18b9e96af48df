"""A small dataset folder following the dataset contract, for the lm-eval tests.

It is written the way a build is read: Parquet files per config and split,
plus a README.md card whose YAML ``configs:`` block names them, so
``datasets.load_dataset(folder, config)`` loads it without a script. The
examples come from two hand-written notebook sessions chosen so that each
baseline has something to score: cells without output (empty targets),
re-run cells (next cell equals the last one), cells ending in a variable name
(the runtime repr is the output). Prompts follow the shape of the real ones
(history, runtime block, question), rendered here to stay independent of the
builder's internals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets

# (code, output, variables after the cell as (name, type, repr)); the runtime
# before a cell is the variables after the previous one.
Cell = tuple[str, str, list[tuple[str, str, str]]]

SESSIONS: dict[str, list[Cell]] = {
    "nb-arith": [
        ("import math", "", []),
        ("x = 41", "", [("x", "int", "41")]),
        ("x = x + 1", "", [("x", "int", "42")]),
        ("x", "42", [("x", "int", "42")]),
        ("x", "42", [("x", "int", "42")]),
        ("print(math.sqrt(x))", "6.48074069840786\n", [("x", "int", "42")]),
        ("names = ['a', 'b']", "", [("x", "int", "42"), ("names", "list", "['a', 'b']")]),
        ("names", "['a', 'b']", [("x", "int", "42"), ("names", "list", "['a', 'b']")]),
        ("len(names)", "2", [("x", "int", "42"), ("names", "list", "['a', 'b']")]),
        ("names;", "", [("x", "int", "42"), ("names", "list", "['a', 'b']")]),
    ],
    "nb-text": [
        ("s = 'hello'", "", [("s", "str", "'hello'")]),
        ("s", "'hello'", [("s", "str", "'hello'")]),
        ("s.upper()", "'HELLO'", [("s", "str", "'hello'")]),
        ("s.upper()", "'HELLO'", [("s", "str", "'hello'")]),
        ("t = s * 2\nt", "'hellohello'", [("s", "str", "'hello'"), ("t", "str", "'hellohello'")]),
        ("t", "'hellohello'", [("s", "str", "'hello'"), ("t", "str", "'hellohello'")]),
        ("for c in 'ab':\n    print(c)", "a\nb\n", [("s", "str", "'hello'"), ("t", "str", "'hellohello'")]),
        ("s", "'hello'", [("s", "str", "'hello'"), ("t", "str", "'hellohello'")]),
    ],
}

TASK_CONFIGS = (
    "output_prediction",
    "output_prediction_runtime",
    "next_cell_prediction",
    "next_cell_prediction_runtime",
)

_VARIABLE = {
    "name": datasets.Value("string"),
    "type": datasets.Value("string"),
    "size_bytes": datasets.Value("int64"),
    "repr": datasets.Value("string"),
    "repr_truncated": datasets.Value("bool"),
    "shape": datasets.List(datasets.Value("int64")),
    "len": datasets.Value("int64"),
}
FEATURES = datasets.Features(
    {
        "example_id": datasets.Value("string"),
        "trajectory_id": datasets.Value("string"),
        "step": datasets.Value("int64"),
        "history": datasets.List({"code": datasets.Value("string"), "output": datasets.Value("string")}),
        "code": datasets.Value("string"),
        "runtime": datasets.List(_VARIABLE),
        "runtime_text": datasets.Value("string"),
        "prompt": datasets.Value("string"),
        "target": datasets.Value("string"),
        "target_is_error": datasets.Value("bool"),
        "stable": datasets.Value("bool"),
    }
)


def _variable(name: str, type_name: str, text: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_name,
        "size_bytes": 28 + len(text),
        "repr": text,
        "repr_truncated": False,
        "shape": None,
        "len": None,
    }


def _prompt(history: list[dict[str, str]], runtime_text: str, question: str) -> str:
    cells = "".join(
        f"Cell {number}:\n```python\n{cell['code']}\n```\nOutput:\n{cell['output'] or '(no output)'}\n\n"
        for number, cell in enumerate(history, 1)
    )
    return f"Previous code cells and their outputs:\n\n{cells}{runtime_text}{question}"


def _runtime_text(runtime: list[dict[str, Any]]) -> str:
    lines = "".join(f"- {var['name']}: {var['type']}\n    {var['repr']}\n" for var in runtime) or "(none)\n"
    return f"Runtime state of the kernel before this cell ({len(runtime)} user variables):\n{lines}\n"


def task_rows(config: str) -> list[dict[str, Any]]:
    """Every example of one config, in session and step order."""
    next_cell = config.startswith("next_cell")
    with_runtime = config.endswith("_runtime")
    rows = []
    for trajectory_id, cells in SESSIONS.items():
        for step, (code, output, _) in enumerate(cells):
            history = [{"code": c, "output": o} for c, o, _ in cells[:step]]
            state = [_variable(*var) for var in cells[step - 1][2]] if step else []
            runtime = state if with_runtime else []
            runtime_text = _runtime_text(state) if with_runtime else ""
            if next_cell:
                question = "Predict the code of the next cell that will be executed. Answer with the code only.\n"
            else:
                question = f"Predict the output of this code cell. Answer with the output only.\n```python\n{code}\n```\n"
            rows.append(
                {
                    "example_id": f"{trajectory_id}/{step}",
                    "trajectory_id": trajectory_id,
                    "step": step,
                    "history": history,
                    "code": "" if next_cell else code,
                    "runtime": runtime,
                    "runtime_text": runtime_text,
                    "prompt": _prompt(history, runtime_text, question),
                    "target": code if next_cell else output,
                    "target_is_error": False,
                    "stable": None if step % 3 == 0 else True,
                }
            )
    return rows


def is_test_example(row: dict[str, Any]) -> bool:
    """The fixture's ``test`` sample: every step but the first of each session."""
    return row["step"] > 0


def write_dataset(folder: Path) -> Path:
    """Write the four task configs (splits ``test`` and ``full``) and the card; return ``folder``."""
    card = ["---", "configs:"]
    for config in TASK_CONFIGS:
        rows = task_rows(config)
        card.append(f"- config_name: {config}\n  data_files:")
        for split, split_rows in (("test", [r for r in rows if is_test_example(r)]), ("full", rows)):
            path = folder / config / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_list(split_rows, features=FEATURES).to_parquet(str(path))
            card.append(f"  - split: {split}\n    path: {config}/{split}.parquet")
    card += ["---", "", "# Themisto test fixture", ""]
    (folder / "README.md").write_text("\n".join(card), encoding="utf-8")
    return folder
