"""JSON Lines reading shared by trajectories, JuNE logs and lm-eval sample logs."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError


def iter_json_objects(
    path: Path, error: type[InputError] = InputError, what: str = "JSON Lines file", data: bytes | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line; any defect raises ``error`` in one line.

    ``data``: the file's bytes, read already (read as the file would be, ``path`` naming it in messages).
    """
    try:
        opened = path.open(encoding="utf-8") if data is None else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        with opened as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise error(f"{path}:{number}: not valid JSON ({exc.msg})") from None
                if not isinstance(record, dict):
                    raise error(f"{path}:{number}: expected a JSON object per line")
                yield number, record
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
