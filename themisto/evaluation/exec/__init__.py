"""Execution-checked next-cell prediction: run each predicted cell in the kernel state the model was shown.

Text similarity cannot tell a correct cell written differently from a wrong
one, nor see whether a cell fits the live state (real column names, variable
names, types). ``themisto exec-score`` runs every next-cell prediction of an
lm-eval sample log (``samples_themisto_next_cell*_<stamp>.jsonl``) in the state
before its target step and writes, per sample, to
``exec_samples_<task>.jsonl``:

- ``exec_ok``: 1 when the cell ran without an exception within the timeout;
- ``exec_match``: 1 when its plain-text output equals the developer's cell's
  recorded output after :func:`~themisto.kernel.outputs.normalize_output`
  (what ``exact_match_norm`` compares);
- ``state_match``: 1 when the user namespace after it equals the namespace
  after the developer's cell, compared by the snapshot's per-variable
  descriptions (name, type, repr with memory addresses masked, shape, len; not
  the size estimate, which depends on how a container was grown, see
  :func:`~themisto.kernel.forking.state_key`);
- ``error``: ``EName: evalue`` (one line) when it failed, else null;
- ``diverged``: the replay of the target step did not reproduce its recorded
  output, so the state differs from what was recorded: the three outcomes are
  null there (excluded from every exec metric);
- ``tampered``: the prediction changed the replay itself (its namespace or
  working folder) or killed its kernel: scored 0 on all three.

Each line also names ``example_id``, ``trajectory_id`` and ``step``.

One replay per trajectory, one fork per prediction: each trajectory involved
is replayed once, in one kernel, up to its last step with a prediction; before
the developer's cell of a step where predictions wait, one request runs all of
them (distinct codes only, the developer's own cell first) through
:mod:`themisto.kernel.inside.fork`, a silent one of its own or, in the sandbox,
mostly the request of the replay cell before the step, after that cell and its
snapshot: the kernel forks itself per prediction, the
child runs it with its output captured, sends back its output and namespace
snapshot, and exits; the parent's state is untouched. Then the developer's cell
runs in the parent, which gives the reference output and state and moves the
replay on (:mod:`themisto.evaluation.exec.replay`). The replay repeats the
recording: its options (the caps of a step, the variable cap) come from the
trajectory's provenance, the kernel restarts where a step is ``restarted``, a
cell the user interrupted is interrupted after the same ``interrupt_after``
seconds, and a step that stopped an earlier recording is not run again.

The developer's own next cell runs through the same path for every example as
the pseudo-model ``themisto-reference``; its ``exec_match`` rate is the ceiling.

What a prediction can reach (see also SECURITY.md):

- Its code only: every code goes to the kernel as a file, which the kernel
  opens and deletes before the first fork and only that code's child reads;
  the kernel never holds a cell's text, so no child finds another's (or the
  developer's) by walking its memory.
- Its own copy of everything: variables, modules and open figures are the
  child's copy-on-write memory; it works in a private copy of the replay's
  folder and a private temporary folder. In its Landlock domain (the default)
  it can write nowhere else, cannot signal or ptrace the kernel, the scorer or
  anything outside its domain (no ``/proc/<pid>/mem``), and cannot connect to
  any TCP port (so not to the kernel's own channels, whose sockets the child
  closes before the cell runs).
- What the domain leaves open (files an earlier cell left open for writing,
  shared memory) is caught afterwards: the replay checks its namespace and
  working folder after each step's predictions, and where one changed it
  restores itself and runs them one at a time to find which; that one is
  marked ``tampered``.

Modules: :mod:`~themisto.evaluation.exec.inputs` (sample logs, recorded
steps, provenance options, the plan), :mod:`~themisto.evaluation.exec.replay`
(scoring one trajectory), :mod:`~themisto.evaluation.exec.run` (a whole run:
locks, threads, Ctrl-C), :mod:`~themisto.evaluation.exec.files` (what is written),
:mod:`~themisto.evaluation.exec.journal` (each scored step appended at once, so a killed scorer keeps it).
The replay kernel that forks is :class:`themisto.kernel.ForkingSession`, shared with the recorder.
"""

from themisto.evaluation.exec.files import exec_metric_values, exec_samples_name
from themisto.evaluation.exec.inputs import NEXT_CELL_TASKS, find_sample_logs, load_recorded
from themisto.evaluation.exec.replay import TrajectoryScores, score_trajectory
from themisto.evaluation.exec.run import ExecReport, exec_score

__all__ = [
    "NEXT_CELL_TASKS",
    "ExecReport",
    "TrajectoryScores",
    "exec_metric_values",
    "exec_samples_name",
    "exec_score",
    "find_sample_logs",
    "load_recorded",
    "score_trajectory",
]
