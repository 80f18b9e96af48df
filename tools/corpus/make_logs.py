"""Generate the bundled JuNE-format development logs in data/logs/ from the sessions of :mod:`tools.corpus.sessions`.

A session is a scenario's notebook plan (:mod:`tools.corpus.scenarios`) played
by one simulated developer (:mod:`tools.corpus.developer`): the developer adds,
edits, runs, deletes and saves cells, restarts the kernel and renames the
notebook through a :class:`~tools.corpus.notebook.Notebook`. Every ``run`` really executes the cell in a live
``python3`` Jupyter kernel whose working directory holds a copy of
``data/files/`` as ``files/``, and the outputs it produced become the
``cell_output`` of the ``finished_execute`` event, so the logs carry real
original outputs.

Generation is deterministic, so regenerating reproduces the committed CSVs
byte for byte: timestamps, ids and think times derive from the session name;
the kernel runs with a fixed hash seed and one BLAS thread; the few outputs
that depend on the machine (interpreter prefix, temporary-file paths, the
kernel's pid) are rewritten to fixed strings.

Usage: ``python -m tools.corpus.make_logs [--out DIR] [--only NAME ...] [--jobs N]`` (from the repository root)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import datetime as dt
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from themisto.recording.sources.june import JUNE_COLUMNS
from tools.corpus import LOGS_DIR
from tools.corpus.notebook import Notebook, SessionLog
from tools.corpus.sessions import SESSIONS, Session

# -- sessions ----------------------------------------------------------------


def sessions(only: list[str] | None = None) -> list[Session]:
    """The sessions of :mod:`tools.corpus.sessions`, in order; ``only`` restricts them to those names."""
    table = SESSIONS
    if only:
        unknown = set(only) - {s.name for s in table}
        if unknown:
            raise SystemExit(f"unknown session(s): {', '.join(sorted(unknown))}")
        table = [s for s in table if s.name in only]
    return table


def generate(session: Session, out: Path) -> list[dict[str, Any]]:
    """Play one session against live kernels and return its JuNE events.

    When the plan breaks, the events so far go to ``<out>/<name>.failed.csv`` for inspection.
    """
    with ExitStack() as kernels:
        log = SessionLog(
            session.name,
            session.persona.user,
            session.persona.expert,
            dt.datetime.fromisoformat(session.start),
            kernels,
        )
        try:
            session.play(log, Notebook)
        except Exception:
            write_csv(log.events, out / f"{session.name}.failed.csv")
            raise
    return log.events


def write_csv(events: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=JUNE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(events)


def generate_into(name: str, out: Path) -> str:
    """Generate the session ``name`` into ``out``; a line that says what was written."""
    (session,) = sessions([name])
    try:
        events = generate(session, out)
    except RuntimeError:
        # jupyter_client can lose a race for a free port on a busy machine ("Kernel died
        # before replying"); a broken plan fails the same way twice, so one retry is safe
        events = generate(session, out)
    write_csv(events, out / f"{name}.csv")
    executes = sum(e["event"] == "execute" for e in events)
    return f"{name}: {len(events)} events, {executes} executions"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=LOGS_DIR, help="directory for the CSV logs (default: data/logs)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="generate only these sessions")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="sessions generated at once (default 1)")
    args = parser.parse_args(argv)
    names = [s.name for s in sessions(args.only)]
    failed = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(generate_into, name, args.out): name for name in names}
        for future in concurrent.futures.as_completed(futures):
            try:
                print(future.result(), file=sys.stderr)
            except Exception as exc:  # report every broken session, not only the first
                failed.append(futures[future])
                print(f"{futures[future]}: failed: {exc}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(sorted(failed))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
