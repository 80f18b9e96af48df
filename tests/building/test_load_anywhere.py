"""``datasets.load_dataset`` on a local build by its path, from another working directory, after a rebuild.

The README's form, ``load_dataset("/path/to/hf_dataset", CONFIG)``, is run in a fresh interpreter whose
working directory holds no build, offline, with one ``datasets`` cache for every load: a rebuild into the
same folder must be read from its new files, never served from the cache of the previous build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dataset_fixture import SELECTION, SESSIONS, session_steps, task_rows, write_dataset

from themisto.building.parquet import build_dataset
from themisto.building.prompts import RenderOptions
from themisto.trajectory import TrajectoryWriter

pytestmark = pytest.mark.slow  # a fresh interpreter per load, and two builds

CONFIG = "output_prediction_runtime"
LOAD = """
import json, sys
from datasets import load_dataset
rows = load_dataset(sys.argv[1], sys.argv[2], split="test")
print(json.dumps([[row["example_id"], row["prompt"]] for row in rows]))
"""


def load_elsewhere(location: str, cwd: Path, cache: Path) -> list[list[str]]:
    """``load_dataset(location, CONFIG, split="test")`` run in ``cwd``, offline, with ``cache`` as its cache."""
    env = os.environ | {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", LOAD, location, CONFIG], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded: list[list[str]] = json.loads(done.stdout)
    return loaded


def test_a_build_loads_by_its_path_from_anywhere_and_a_rebuild_is_never_stale(tmp_path: Path) -> None:
    build = write_dataset(tmp_path / "hf_dataset")
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    cache = tmp_path / "cache"
    expected = [[row["example_id"], row["prompt"]] for row in task_rows(build, CONFIG)]
    assert load_elsewhere(str(build), elsewhere, cache) == expected
    assert load_elsewhere("../../hf_dataset", elsewhere, cache) == expected  # a path relative to the cwd

    # The same trajectories rebuilt into the same folder with the JSON runtime block: other prompts, same ids.
    trajectories = _fixture_trajectories(tmp_path / "trajectories")
    build_dataset(trajectories, build, SELECTION, RenderOptions(runtime_format="json"))
    rebuilt = [[row["example_id"], row["prompt"]] for row in task_rows(build, CONFIG)]
    assert [row[0] for row in rebuilt] == [row[0] for row in expected] and rebuilt != expected
    assert load_elsewhere(str(build), elsewhere, cache) == rebuilt


def _fixture_trajectories(folder: Path) -> list[Path]:
    """The fixture's sessions as trajectory files in ``folder`` (what write_dataset builds from)."""
    folder.mkdir()
    paths = []
    for trajectory_id, cells in SESSIONS.items():
        path = folder / f"{trajectory_id}.jsonl"
        with TrajectoryWriter(path) as writer:
            for step in session_steps(trajectory_id, cells):
                writer.write(step)
        paths.append(path)
    return paths
