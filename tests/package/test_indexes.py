"""Every package's docstring is an index of its modules: a module added without a line there fails here."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import themisto


def _packages() -> list[str]:
    """Themisto and each of its subpackages, by dotted name."""
    root = Path(themisto.__file__).parent
    names = ["themisto"]
    for info in pkgutil.walk_packages([str(root)], prefix="themisto."):
        if info.ispkg:
            names.append(info.name)
    return names


def test_every_module_is_named_in_its_package_docstring() -> None:
    missing = []
    for package in _packages():
        module = importlib.import_module(package)
        doc = module.__doc__ or ""
        for info in pkgutil.iter_modules(module.__path__):
            # named as :mod:`~themisto.x.y` or :mod:`themisto.x.y`, or for the CLI as its subcommand's module
            if info.name.startswith("_") or info.name == "__main__":
                continue
            if f"{package}.{info.name}`" not in doc:
                missing.append(f"{package}.{info.name}")
    assert not missing, f"modules not named in their package's docstring: {missing}"


def test_the_index_names_no_module_that_is_gone() -> None:
    import re

    stale = []
    for package in _packages():
        doc = importlib.import_module(package).__doc__ or ""
        for name in re.findall(r":mod:`~?(themisto(?:\.\w+)+)`", doc):
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:
                stale.append(name)
    assert not stale, f"package docstrings name modules that do not exist: {stale}"
