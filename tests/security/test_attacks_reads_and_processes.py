"""Attacks on the box around a kernel, fourth round: reads of the answer and of the caller's files, the processes
outside the box seen through ``/proc``, a prediction's processes that outlive it (SECURITY.md, threats 11 and 12).

Real ``themisto record`` and ``exec-score`` processes, as whatever user runs the tests (CI: root), with ``HOME``
pointed at a folder of the test's that holds a secret. Each probe prints ``allowed`` or the errno's name.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from attacks import assert_refused_unless_unconfined, process_environment, run_themisto, write_notebook
from exec_logs import write_next_cell_logs

from themisto.kernel.inside import landlock
from themisto.trajectory import read_trajectory
from themisto.vocabulary import NEXT_CELL_TASK, REFERENCE_MODEL

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock ABI >= 6 (scoped signals)"),
]

# Helpers of every probe: read a file or list a folder; the command lines of the processes /proc shows.
PROBES = r"""
import errno, os
def read(path):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, 'rb').read(1)
        return 'allowed'
    except OSError as exc:
        return errno.errorcode[exc.errno]
def commands():
    found = []
    for name in os.listdir('/proc'):
        try:
            found.append(open(f'/proc/{name}/cmdline', 'rb').read().split(b'\0'))
        except OSError:  # not a process, or one that ended
            pass
    return found
def sees(word):
    return any(word.encode() in command for command in commands())
"""


def _secrets(tmp_path: Path) -> dict[str, Path]:
    """The files a kernel must not read, placed by the test: a build, a sample log, a trajectory, a file in the
    caller's home (``HOME`` of the themisto process)."""
    secrets = {
        "build": tmp_path / "build" / "tasks.jsonl",
        "samples": tmp_path / "run" / "old" / "samples_next_cell.jsonl",
        "trajectory": tmp_path / "trajectories" / "old.jsonl",
        "home": tmp_path / "home" / ".netrc",
    }
    for path in secrets.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the answer\n")
    return secrets


def _environment(tmp_path: Path) -> dict[str, str]:
    return process_environment(HOME=str(tmp_path / "home"))


def test_a_cell_reads_no_answer_no_home_and_sees_no_process_outside_its_box(tmp_path: Path) -> None:
    secrets = _secrets(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.csv").write_text("a,b\n1,2\n")
    probes = {
        **{f"print(read({str(path)!r}))": "EACCES" for path in secrets.values()},
        f"print(read({str(tmp_path / 'build')!r}))": "EACCES",  # listing the build's folder
        "print(read('data.csv'), read('.'))": "allowed allowed",  # its own working directory
        # before: every process of the machine, the recorder among them, and the test's own
        "print(sees('record'), sees('pytest'))": "False False",
        f"print(read('/proc/{os.getpid()}/cmdline'))": "ENOENT",
        "print(os.getpid(), max(int(name) for name in os.listdir('/proc') if name.isdigit()) < 100)": "2 True",
    }
    notebook = write_notebook(work / "reads.ipynb", [PROBES, *probes])
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"), env=_environment(tmp_path))
    assert result.returncode == 0, result.stderr
    verdicts = [step.output for step in read_trajectory(tmp_path / "out" / "reads.jsonl")][1:]
    assert dict(zip(probes, verdicts, strict=True)) == probes


# What notebooks of the corpus do, each reading files of the interpreter's, the system's or its own folder.
REAL_CELLS = {
    "import numpy as np\na = np.random.default_rng(0).random((400, 400))\nprint(round(float((a @ a).sum())) > 0)": (
        "True"  # OpenBLAS, its threads and the CPU information they read
    ),
    "import pandas as pd\nprint(pd.read_csv('data.csv').shape, pd.Timestamp('2024-06-01', tz='Europe/Paris').hour)": (
        "(1, 2) 0"
    ),
    (
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
        "plt.title('fonts')\nplt.savefig('plot.png')\nprint(os.path.getsize('plot.png') > 0)"
    ): "True",
    "from sklearn.datasets import load_iris\nprint(load_iris().data.shape)": "(150, 4)",
    "import statsmodels.api as sm\nprint(sm.datasets.longley.load_pandas().data.shape)": "(16, 7)",
    "import locale, time, zoneinfo\nprint(zoneinfo.ZoneInfo('America/New_York').key, time.localtime().tm_year > 2000)": (
        "America/New_York True"
    ),
    "import subprocess\nprint(subprocess.run(['ls', 'data.csv'], capture_output=True, text=True).stdout.strip())": (
        "data.csv"
    ),
}


def test_real_notebooks_still_record_in_the_box(tmp_path: Path) -> None:
    pytest.importorskip("statsmodels")
    pytest.importorskip("sklearn")
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.csv").write_text("a,b\n1,2\n")
    notebook = write_notebook(work / "real.ipynb", ["import os", *REAL_CELLS])
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"), env=_environment(tmp_path))
    assert result.returncode == 0, result.stderr
    steps = read_trajectory(tmp_path / "out" / "real.jsonl")[1:]
    assert [step.error for step in steps] == [None] * len(REAL_CELLS)
    assert dict(zip(REAL_CELLS, [step.output for step in steps], strict=True)) == REAL_CELLS
    # the memory measured is the kernel's (which imported numpy), by its host pid, not its init's
    assert steps[0].memory_bytes is not None and steps[0].memory_bytes > 50 * 2**20


# The session a prediction attacks at step 2 (where the developer printed 42) and step 3 (the developer's 7).
SESSION = ["counter = 6", "counter += 0", "print(counter * 7)", "counter + 1"]
# Each prediction prints the developer's 42 only when refused, so its exec_match says whether it was.
# Before: it read the sample log, the trajectory, the build and the home file.
READ_THE_ANSWER = (
    PROBES + "verdicts = {read(path) for path in PATHS}\nprint(42 if verdicts == {'EACCES'} else verdicts)"
)
# Before: /proc showed exec-score's command line (the run folder and the trajectories in it) and the test's.
SEE_THE_SCORER = PROBES + "print(42 if not (sees('exec-score') or sees('pytest')) else commands())"
# Before: a process in a session of its own left the prediction's process group and lived on, as long as the
# replay kernel, reading what later predictions wrote.
ESCAPE = (
    "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', 'themisto-escapee'], start_new_session=True)\n"
    "if os.fork() == 0:\n"  # and a double-forked daemon
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', 'themisto-escapee'])\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "print(42)"
)
# At the next step, the developer's 7 only if nothing of the escape lives.
LOOK_FOR_ESCAPEES = PROBES + "escaped = sees('themisto-escapee')\ncounter + 1 if not escaped else 'alive'"


def test_a_prediction_reads_no_answer_sees_no_scorer_and_its_processes_die_with_it(tmp_path: Path) -> None:
    secrets = _secrets(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    notebook = write_notebook(work / "session.ipynb", SESSION)
    environment = _environment(tmp_path)
    recorded = run_themisto("record", str(notebook), "-o", str(tmp_path / "trajectories"), env=environment)
    assert recorded.returncode == 0, recorded.stderr
    trajectory = tmp_path / "trajectories" / "session.jsonl"
    run_dir = tmp_path / "run"
    samples = run_dir / "honest"  # the folder of a sample log of this very run, written below
    paths = [*map(str, secrets.values()), str(trajectory), str(run_dir), str(samples)]
    predictions = {
        ("honest", NEXT_CELL_TASK): {2: "print(6 * 7)", 3: "counter + 1"},
        ("reader", NEXT_CELL_TASK): {2: READ_THE_ANSWER.replace("PATHS", repr(paths))},
        ("watcher", NEXT_CELL_TASK): {2: SEE_THE_SCORER},
        ("escaper", NEXT_CELL_TASK): {2: "import os\n" + ESCAPE, 3: LOOK_FOR_ESCAPEES},
    }
    write_next_cell_logs(run_dir, read_trajectory(trajectory), predictions)
    arguments = ["exec-score", str(run_dir), "--trajectories", str(trajectory), "--timeout", "60", "--quiet"]
    scored = run_themisto(*arguments, env=environment)
    assert scored.returncode == 0, scored.stderr

    def line(model: str, step: int) -> dict[str, Any]:
        lines = (run_dir / model / f"exec_samples_{NEXT_CELL_TASK}.jsonl").read_text().splitlines()
        return {record["step"]: record for record in map(json.loads, lines)}[step]

    scored_lines = {(model, step): line(model, step) for (model, _), codes in predictions.items() for step in codes}
    failed = {key: record for key, record in scored_lines.items() if record["exec_match"] != 1}
    assert not failed, failed
    assert (line(REFERENCE_MODEL, 2)["exec_match"], line(REFERENCE_MODEL, 3)["exec_match"]) == (1, 1)


# Makes mount(2) fail with EPERM, as where a box may not mount its /proc (a container whose /proc is masked).
WITHOUT_MOUNT = """
    (0x15, 0, 1, 165),  # mount
    (0x06, 0, 0, 0x00050000 | 1),  # EPERM
"""


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="x86_64's mount number")
def test_where_proc_cannot_be_mounted_record_refuses_in_one_line_naming_no_sandbox(tmp_path: Path) -> None:
    assert_refused_unless_unconfined(tmp_path, WITHOUT_MOUNT, "PID namespace", "/proc", "Operation not permitted")
