"""exec-score's journal: each step's exec-sample lines on disk as soon as the step is scored.

A run that ends cleanly (Ctrl-C, SIGTERM and SIGXCPU included) rewrites every file at the end, in sample-log
order (:func:`~themisto.evaluation.exec.run.exec_score`). A run killed outright (SIGKILL, or ``RLIMIT_CPU``
reached with a hard limit equal to its soft one) never gets there: what it scored is then the journal's,
complete lines in the order the steps were scored, which ``themisto report`` joins by example as it joins
any exec samples. Each line goes to the kernel in one ``write`` (no buffer of the process's own), so a kill
loses at most the steps in flight.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

from themisto.evaluation.exec.files import exec_samples_name, write_reference_log
from themisto.evaluation.exec.inputs import Prediction, SampleLog
from themisto.evaluation.exec.replay import TrajectoryScores
from themisto.exceptions import OutputError


class Journal:
    """Appends the exec-sample lines of each scored step to its logs' files; thread-safe.

    A file is opened (emptied: it is this run's from now on) when its first line comes; a reference log's
    lm-eval sample log is written then too, so the report shows its row beside the models'.
    """

    def __init__(self, logs: Sequence[SampleLog], references: Sequence[SampleLog], shard: tuple[int, int] | None):
        self._shard = shard
        self._references = {id(log) for log in references}
        self._waiting: dict[tuple[str, int], list[tuple[SampleLog, Prediction]]] = {}
        for log in logs:
            for prediction in log.predictions:
                self._waiting.setdefault((prediction.trajectory_id, prediction.step), []).append((log, prediction))
        self._files: dict[int, int] = {}  # id of the log -> open descriptor
        self._lock = threading.Lock()

    def scored(self, scores: TrajectoryScores, step: int) -> None:
        """Write the lines of ``step`` of ``scores``'s trajectory (the predictions it has scored there)."""
        with self._lock:
            for log, prediction in self._waiting.pop((scores.trajectory_id, step), []):
                score = scores.scores.get((step, prediction.code))
                if score is not None:
                    line = json.dumps(score.record(prediction), ensure_ascii=False) + "\n"
                    _write_all(self._descriptor(log), line.encode("utf-8"))

    def close(self) -> None:
        """Close every file (what was written stays)."""
        with self._lock:
            for descriptor in self._files.values():
                os.close(descriptor)
            self._files.clear()

    def _descriptor(self, log: SampleLog) -> int:
        descriptor = self._files.get(id(log))
        if descriptor is None:
            path = log.out_dir / exec_samples_name(log.task, self._shard)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if id(log) in self._references:
                    write_reference_log(log)
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
            self._files[id(log)] = descriptor
        return descriptor


def _write_all(descriptor: int, data: bytes) -> None:
    while data:
        data = data[os.write(descriptor, data) :]
