"""The kernel side imports only the standard library and what an IPython kernel already has."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from themisto.kernel import inside

KERNELSIDE = Path(inside.__file__).parent
MODULES = sorted(path for path in KERNELSIDE.glob("*.py") if path.name != "__init__.py")
# What a running IPython kernel has loaded already; nothing else outside the standard library.
KERNEL_PACKAGES = {"IPython", "ipykernel"}


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The imports inside ``if TYPE_CHECKING:`` blocks of other kernel-side modules (never run in a kernel)."""
    found: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.body:
                if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("themisto.kernel.inside."):
                    found.add(child)
    return found


def imported_names(source: str) -> set[str]:
    """Top-level names of every module an ``import``, ``from ... import`` or ``__import__('...')`` names.

    A sibling kernel-side module imported for the type checker alone (under ``if TYPE_CHECKING:``) is not
    counted: it never runs, and the kernel gets the sibling's objects from the host.
    """
    names: set[str] = set()
    tree = ast.parse(source)
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.add("." * node.level + (node.module or ""))
            elif node.module:
                names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.add(node.args[0].value.split(".")[0])
    return names


def foreign(names: set[str]) -> set[str]:
    return {name for name in names if name not in sys.stdlib_module_names and name not in KERNEL_PACKAGES}


def test_the_kernel_side_has_modules_to_check() -> None:
    assert {path.name for path in MODULES} >= {"snapshot.py", "fork.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_a_kernel_side_module_imports_only_the_standard_library(path: Path) -> None:
    assert foreign(imported_names(path.read_text(encoding="utf-8"))) == set()


def test_the_check_sees_every_form_of_import() -> None:
    source = "import numpy.linalg\nfrom themisto import x\nfrom . import sibling\n__import__('pandas')\nimport os"
    assert foreign(imported_names(source)) == {"numpy", "themisto", ".", "pandas"}
    # only a sibling's types, only for the type checker
    typing_only = (
        "if TYPE_CHECKING:\n    from themisto.kernel.inside.wire import R\n    from themisto.recording import Q"
    )
    assert foreign(imported_names(typing_only)) == {"themisto"}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_a_kernel_side_module_runs_as_sent_where_only_the_standard_library_imports(path: Path) -> None:
    # Executed as the kernel executes it (source text into a fresh module), in an interpreter where any
    # import outside the standard library and the kernel's packages fails.
    script = f"""
import sys, types
class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.split('.')[0]
        if top not in sys.stdlib_module_names and top not in {sorted(KERNEL_PACKAGES)!r}:
            raise ImportError('refused: ' + name)
sys.meta_path.insert(0, Refuse())
module = types.ModuleType('sent')
exec(compile(open({str(path)!r}, encoding='utf-8').read(), 'sent', 'exec'), module.__dict__)
print('ok')
"""
    result = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
