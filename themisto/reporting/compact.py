"""Copy lm-eval run folders keeping only what ``themisto report`` reads: results small enough to commit.

A sample log line of a likelihood task carries its whole prompt three times
(the doc, lm-eval's arguments, the response), about 10 KB; the report reads
only the example's id, its doc columns (:data:`~themisto.reporting.samples.DOC_COLUMNS`)
and the per-sample metrics. :func:`compact_runs` writes each sample log with
only those (and lm-eval's ``doc_hash``/``prompt_hash``/``target_hash``, so a
reader can check a line against a rebuild), each results file without the
samples lm-eval embeds in it, and copies ``exec_samples_*.jsonl`` unchanged,
under the same relative paths. ``themisto report`` gives the same report on
the copy as on the original (``tests/reporting/test_report_models.py``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError
from themisto.filesystem import prepare_output_folder, write_atomically
from themisto.jsonl import iter_json_objects
from themisto.lm_eval_files import find_sample_log_files
from themisto.reporting.samples import DOC_COLUMNS, read_json
from themisto.vocabulary import EXEC_SAMPLES_PREFIX

# The fields of a sample line kept besides its metrics (named by the line's ``metrics`` list).
KEPT_FIELDS = ("doc_id", "filter", "metrics", "doc_hash", "prompt_hash", "target_hash")
KEPT_DOC_FIELDS = ("example_id", *DOC_COLUMNS)
# lm-eval embeds every sample in the results file too (``--log_samples``); the sample logs have them.
DROPPED_RESULTS_FIELDS = ("samples",)


def compact_sample(record: dict[str, Any]) -> dict[str, Any]:
    """One sample line with only the fields the report reads (and the hashes)."""
    kept = {name: record[name] for name in KEPT_FIELDS if name in record}
    doc = record.get("doc")
    if isinstance(doc, dict):
        kept["doc"] = {name: doc[name] for name in KEPT_DOC_FIELDS if name in doc}
    for name in record.get("metrics") or ():
        if isinstance(name, str) and name in record:
            kept[name] = record[name]
    return kept


def _compact_results(source: Path, target: Path) -> None:
    """A results file without the embedded samples."""
    content = read_json(source)
    if isinstance(content, dict):
        for name in DROPPED_RESULTS_FIELDS:
            content.pop(name, None)
    write_atomically(target, json.dumps(content, indent=2, ensure_ascii=False) + "\n")


def compact_runs(run_dirs: Sequence[Path], output: Path) -> int:
    """Write the compact copy of the run folders' logs beneath ``output``; the number of sample logs written.

    Each run folder's layout is kept relative to it (``RUN/<model>/samples_*.jsonl`` becomes
    ``OUTPUT/<model>/samples_*.jsonl``), so several run folders merge into one.
    """
    output = Path(output)
    resolved = output.resolve()
    logs = find_sample_log_files(run_dirs)
    if not logs:
        raise InputError(
            f"no lm-eval sample files (samples_<task>_<timestamp>.jsonl) under {', '.join(map(str, run_dirs))}"
        )
    for run_dir in run_dirs:
        if resolved == run_dir.resolve() or resolved.is_relative_to(run_dir.resolve()):
            raise InputError(f"{output}: the output folder must not lie inside the run folder {run_dir}")
    folders: dict[Path, Path] = {}
    written: set[Path] = set()
    for log in logs:
        # the run folders' layouts merge beneath the output, as ``themisto report`` merges them
        target_folder = output / log.path.parent.relative_to(log.run_dir)
        target = target_folder / log.path.name
        if target in written:
            raise InputError(
                f"{log.path}: another run folder has a log of the same name ({target.relative_to(output)})"
            )
        written.add(target)
        if log.path.parent not in folders:  # one write probe per folder, not per log
            prepare_output_folder(target_folder)
            folders[log.path.parent] = target_folder
        lines = [
            json.dumps(compact_sample(record), ensure_ascii=False)
            for _, record in iter_json_objects(log.path, InputError, "sample log")
        ]
        write_atomically(target, "".join(line + "\n" for line in lines))
    for source_folder, target_folder in folders.items():
        for results in sorted(source_folder.glob("results_*.json")):
            _compact_results(results, target_folder / results.name)
        for exec_samples in sorted(source_folder.glob(f"{EXEC_SAMPLES_PREFIX}*.jsonl")):
            shutil.copyfile(exec_samples, target_folder / exec_samples.name)
    return len(logs)
