"""What a build produced: the summary the Parquet writer returns and the dataset card describes."""

from __future__ import annotations

from dataclasses import dataclass, field

from themisto.building.prompts import RenderOptions
from themisto.building.selection import Selection, SelectionOptions


@dataclass
class BuildSummary:
    """What a build produced: the selection, the options and the row counts per config and split."""

    selection: Selection
    selection_options: SelectionOptions
    render_options: RenderOptions
    rows: dict[str, dict[str, int]]
    trajectory_files: list[str]  # file names only, so the card does not depend on where inputs lie
    files: dict[str, dict[str, str]]  # per config and split: the Parquet file, relative to the build folder
    # the source files (a notebook, an event log, the Zenodo record's files) the provenance of the
    # trajectories names, one per session; None for a trajectory without provenance
    sources: list[str | None] = field(default_factory=list)
    # the licence and attribution notes of the sources' folders (their ATTRIBUTION.md), each once
    attributions: list[str] = field(default_factory=list)
    # per Python version a source notebook's author ran, other than the recording kernel's: its trajectories
    author_pythons: dict[str, int] = field(default_factory=dict)
