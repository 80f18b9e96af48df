"""Where the tests find the checkout they test: the repository root, whatever folder a test module sits in."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPOSITORY = Path(__file__).resolve().parent.parent


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as ``run_all`` loads it: registered first (a dataclass looks its module up while
    it is built), with bench/ on sys.path for its own imports of its neighbours."""
    spec = importlib.util.spec_from_file_location(f"themisto_test_{name}", REPOSITORY / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(REPOSITORY / "bench"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPOSITORY / "bench"))
    return module
