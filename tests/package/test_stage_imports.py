"""The stages meet the live kernel through :mod:`themisto.kernel`'s own names, and exec-score needs no recording."""

from __future__ import annotations

import ast
from pathlib import Path

import themisto

PACKAGE = Path(themisto.__file__).parent
KERNEL = PACKAGE / "kernel"


def imports(path: Path) -> set[str]:
    """The dotted Themisto modules ``path`` imports anywhere (top level, in functions, for the type checker alone)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            # ``from themisto.kernel import transport`` names a submodule too
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == "themisto"}


def modules(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def is_submodule_of(name: str, package: str) -> bool:
    """Whether ``name`` is a module (not a name) inside ``package``."""
    if not name.startswith(package + "."):
        return False
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_the_checks_see_modules() -> None:
    assert len(modules(PACKAGE / "evaluation")) > 5 and len(modules(KERNEL)) > 5
    assert imports(KERNEL / "recorder.py") >= {"themisto.kernel.transport"}
    assert is_submodule_of("themisto.kernel.transport", "themisto.kernel")
    assert not is_submodule_of("themisto.kernel.Recorder", "themisto.kernel")


def test_evaluation_imports_no_recording_module() -> None:
    found = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in modules(PACKAGE / "evaluation")
        for name in imports(path)
        if name == "themisto.recording" or name.startswith("themisto.recording.")
    }
    assert not found


def test_no_module_outside_the_kernel_imports_a_kernel_submodule() -> None:
    found = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in modules(PACKAGE)
        if KERNEL not in path.parents
        for name in imports(path)
        if is_submodule_of(name, "themisto.kernel")
    }
    assert not found


def test_the_kernel_imports_no_stage() -> None:
    stages = ("themisto.recording", "themisto.building", "themisto.evaluation", "themisto.reporting", "themisto.cli")
    found = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in modules(KERNEL)
        for name in imports(path)
        if any(name == stage or name.startswith(stage + ".") for stage in stages)
    }
    assert not found
