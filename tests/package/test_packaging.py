"""Dependencies: the package requires what it imports; the extras, what tests, benches and the corpus import."""

from __future__ import annotations

import ast
import configparser
import functools
import importlib.metadata
import re
import sys
from collections.abc import Mapping

from repository import REPOSITORY

from themisto.trajectory import read_trajectory, trajectory_files

# installed by the Makefile before the extras (the CPU wheel; an unpinned torch pulls a CUDA build)
MAKEFILE_INSTALLS = {"torch"}
IMPORT_LINE = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.MULTILINE)
# Modules of the package that only run with an extra installed (an integration with another
# library), and that extra: what they import beyond install_requires must come with it.
OPTIONAL_MODULES = {
    "themisto/integrations.py": "train",
    "themisto/evaluation/shared_prefix.py": "hf",
    "themisto/evaluation/local_models.py": "hf",  # the export loads the GGUF model
}


def _dist(name: str) -> str:
    """A distribution name in its normal form (``PyYAML`` and ``pyyaml``, ``lm_eval`` and ``lm-eval`` agree)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(section: str, key: str) -> set[str]:
    config = configparser.ConfigParser()
    config.read(REPOSITORY / "setup.cfg")
    lines = [line.strip() for line in config[section][key].splitlines()]
    return {_dist(re.split(r"[<>=!~\[; ]", line)[0]) for line in lines if line and not line.startswith("#")}


def _imports(folders: list[str]) -> dict[str, set[str]]:
    """Third-party top-level modules imported by the Python files under ``folders``, with the files."""
    local = {path.stem for folder in folders for path in (REPOSITORY / folder).rglob("*.py")} | {"themisto", "tools"}
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in (REPOSITORY / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local:
                        found.setdefault(top, set()).add(str(path.relative_to(REPOSITORY)))
    return found


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()  # scans every installed distribution: once


def _providers(module: str) -> set[str]:
    """The distributions that install a top-level module."""
    return {_dist(dist) for dist in _distributions().get(module, [])}


def test_the_package_requires_exactly_what_it_imports() -> None:
    required = _requirements("options", "install_requires")
    imported = _imports(["themisto", "lm_eval_tasks"])
    unrequired = {}
    for module, files in imported.items():
        if _providers(module) & required:
            continue
        # an optional module may import what its extra brings; any other file needs install_requires
        unmet = {
            file
            for file in files
            if file not in OPTIONAL_MODULES
            or not _providers(module) & _requirements("options.extras_require", OPTIONAL_MODULES[file])
        }
        if unmet:
            unrequired[module] = unmet
    assert not unrequired  # imported by the package, so a plain install must bring it
    used = set().union(*(_providers(module) for module in imported))
    assert required <= used, f"required but never imported by the package: {sorted(required - used)}"


def test_tests_and_benches_find_their_packages_in_the_dev_extra() -> None:
    available = _requirements("options", "install_requires") | _requirements("options.extras_require", "dev")
    missing = {
        module: files
        for module, files in _imports(["tests", "bench"]).items()
        if module not in MAKEFILE_INSTALLS and not _providers(module) & available
    }
    assert not missing


def test_the_corpus_tools_find_their_packages_in_the_extras_make_installs() -> None:
    # `make corpus` runs the generator in the venv `make` installs with .[dev,corpus]; block_stats reads a
    # tokenizer with transformers (dev)
    available = (
        _requirements("options", "install_requires")
        | _requirements("options.extras_require", "corpus")
        | _requirements("options.extras_require", "dev")
    )
    missing = {module: files for module, files in _imports(["tools"]).items() if not _providers(module) & available}
    assert not missing


def test_the_corpus_extra_has_what_the_bundled_notebooks_import() -> None:
    # the code the kernel ran for the committed trajectories; a step whose import failed on purpose
    # (a package the session shows missing) needs nothing
    imported = set()
    for path in trajectory_files([REPOSITORY / "data" / "trajectories"]):
        for step in read_trajectory(path):
            if step.error is None or step.error["ename"] != "ModuleNotFoundError":
                imported |= set(IMPORT_LINE.findall(step.code))
    third_party = {module for module in imported if module not in sys.stdlib_module_names}
    corpus = _requirements("options.extras_require", "corpus")
    assert {"sklearn", "pandas"} <= third_party
    assert not {module for module in third_party if not _providers(module) & corpus}


def test_make_installs_the_extras_that_make_run_and_make_test_need() -> None:
    makefile = (REPOSITORY / "Makefile").read_text(encoding="utf-8")
    extras = re.findall(r"pip install -q -e '\.\[([a-z,]+)\]'", makefile)
    assert extras and set(extras[0].split(",")) == {"dev", "corpus"}
    for package in MAKEFILE_INSTALLS:
        assert re.search(rf"pip install -q {package}==", makefile)


def test_the_pre_commit_hook_runs_what_make_lint_runs() -> None:
    import yaml

    config = yaml.safe_load((REPOSITORY / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert [(hook["entry"], hook["pass_filenames"]) for hook in hooks] == [("make lint", False)]
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", (REPOSITORY / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    assert recipe is not None
    commands = recipe.group(1).split("\n")
    assert any("ruff check" in c for c in commands) and any("ruff format --check" in c for c in commands)
    assert any(c.strip() == "$(PY) -m mypy" for c in commands)
