"""The table ``themisto stability`` prints: one row per trajectory, the determinism ceiling, first divergences."""

from __future__ import annotations

import json

from themisto.recording.fidelity import Divergence, Fidelity
from themisto.recording.stability import StabilityReport


def render_table(report: StabilityReport) -> str:
    """A plain-text table of the report: one row per trajectory, the ceiling, and first divergences."""
    header = (
        "trajectory",
        "steps",
        "stable",
        "norm",
        "fidelity",
        "fid.norm",
        "unknown",
        "invented",
        "causes (unstable steps)",
    )
    rows = [header]
    for t in report.trajectories:
        rows.append(
            (
                t.file,
                str(t.steps),
                _percent(t.stable_share),
                _percent(t.stable_norm_share),
                *_fidelity_cells(t.fidelity),
                _causes_cell(t.causes),
            )
        )
    rows.append(
        (
            "ALL",
            str(report.steps),
            _percent(report.ceiling()),
            _percent(report.ceiling(normalised=True)),
            *_fidelity_cells(report.fidelity()),
            _causes_cell(report.causes()),
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    text_columns = (0, len(header) - 1)  # names and causes are left-aligned, figures right-aligned
    lines = [
        "  ".join(
            cell.ljust(w) if i in text_columns else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ceiling = report.ceiling()
    lines.append("")
    if ceiling is None:
        lines.append("determinism ceiling: no steps")
    else:
        lines.append(
            f"determinism ceiling: {_percent(ceiling)} of {report.steps} steps reproduce exactly"
            f" ({_percent(report.ceiling(normalised=True))} after normalisation)"
            f" over the recording and {report.runs} re-execution(s)"
        )
    divergences = [(t.file, t.fidelity) for t in report.trajectories if t.fidelity is not None and t.fidelity.steps]
    if divergences:
        lines.append("first divergence from the original log:")
        for name, result in divergences:
            lines.extend(_divergence_lines(name, result))
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    """A share as a percentage with one decimal, or a dash when undefined."""
    return "-" if value is None else f"{100 * value:.1f}%"


def _fidelity_cells(result: Fidelity | None) -> tuple[str, str, str, str]:
    """The exact and normalised fidelity cells of a row (of the steps compared), the steps with no original
    output to compare (unknown) and the errors the replay invented."""
    if result is None:
        return "-", "-", "-", "-"
    return (
        _percent(result.exact_share),
        _percent(result.norm_share),
        str(result.unknown),
        str(result.invented_errors),
    )


def _causes_cell(causes: dict[str, int]) -> str:
    """``cause count, ...`` for the unstable steps of a row."""
    return ", ".join(f"{cause} {count}" for cause, count in causes.items())


def _divergence_lines(name: str, result: Fidelity) -> list[str]:
    """The lines that say where a trajectory first diverged from its original log, exactly and normalised."""
    if result.first_divergence is None:
        return [f"  {name}: none, all {result.steps} original outputs reproduced"]
    if result.first_divergence == result.first_divergence_norm:
        return [f"  {name}: {_describe(result.first_divergence)}"]
    norm = "none" if result.first_divergence_norm is None else _describe(result.first_divergence_norm)
    return [f"  {name} (exact): {_describe(result.first_divergence)}", f"  {name} (normalised): {norm}"]


def _describe(found: Divergence) -> str:
    """One divergence: the step, the cell, whether it reproduces, and both excerpts."""
    reproducible = {True: "reproducible", False: "unstable", None: "stability unknown"}[found.stable]
    return (
        f"step {found.step}, cell {found.cell_id} ({reproducible}):"
        f" replayed {json.dumps(found.replayed, ensure_ascii=False)}"
        f" vs original {json.dumps(found.original, ensure_ascii=False)}"
    )
