"""exec-score's files: the exec samples it writes per model and task, and the reference's lm-eval sample log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto.exceptions import InputError, OutputError
from themisto.filesystem import write_atomically
from themisto.vocabulary import EXEC_METRICS, EXEC_SAMPLES_PREFIX

if TYPE_CHECKING:
    from themisto.evaluation.exec.inputs import SampleLog


def exec_samples_name(task: str, shard: tuple[int, int] | None = None) -> str:
    """``exec_samples_<task>.jsonl``; a shard's part is ``exec_samples_<task>.<I>-of-<N>.jsonl``."""
    part = "" if shard is None else f".{shard[0]}-of-{shard[1]}"
    return f"{EXEC_SAMPLES_PREFIX}{task}{part}.jsonl"


def write_reference_log(log: SampleLog) -> Path:
    """The reference's lm-eval sample log, so reports show its row (the ceiling) beside the models'.

    Its lines are those lm-eval writes (``doc``, ``target``, the responses,
    ``filter``, ``metrics`` and their values), with the developer's cell as the
    answer. The file is named with the newest stamp of the models' logs of the
    task, so every shard of a run writes the same file.
    """
    from themisto.evaluation.metrics import score_sample
    from themisto.vocabulary import METRIC_NAMES

    stamp = log.stamp or time.strftime("%Y-%m-%dT%H-%M-%S.000000")
    records = [
        {
            "doc_id": number,
            "doc": p.doc,
            "target": p.code,
            "resps": [[p.code]],
            "filtered_resps": [p.code],
            "filter": p.filter or "none",
            "metrics": list(METRIC_NAMES),
            **score_sample(p.code, p.code),
        }
        for number, p in enumerate(log.predictions)
    ]
    path = log.out_dir / f"samples_{log.task}_{stamp}.jsonl"
    write_records(path, records)
    return path


def write_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Write JSON Lines in one step (:func:`~themisto.filesystem.write_atomically`), so a reader never sees half."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot make {path.parent}: {exc.strerror or exc}") from None
    write_atomically(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


def exec_metric_values(records: Iterable[dict[str, Any]], metric: str) -> list[int]:
    """The 0/1 values of one exec metric, excluded (null) samples left out."""
    if metric not in EXEC_METRICS:
        raise InputError(f"unknown exec metric {metric!r} (choose from {', '.join(EXEC_METRICS)})")
    return [record[metric] for record in records if record[metric] is not None]
