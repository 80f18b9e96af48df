"""Where the tests find the checkout they test: the repository root, whatever folder a test module sits in."""

from __future__ import annotations

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
