"""Packaging hook: the wheel carries the lm-eval task files and the default dataset build.

Both live at the repository root (``lm_eval_tasks/``, ``hf_dataset/``), where
``lm_eval --include_path lm_eval_tasks`` and ``load_dataset("hf_dataset")``
find them in a checkout. A wheel has no repository root, so ``build_py`` copies
them into the package as ``themisto/lm_eval_tasks`` and ``themisto/hf_dataset``;
``themisto.evaluation.bundled_path`` looks there first. Everything else,
version included, is in setup.cfg.

Why this file still exists: setup.cfg alone cannot put a folder from outside
the package into it. ``package_dir`` can map ``themisto.hf_dataset`` to
``hf_dataset/`` only for packages listed by hand (``find:`` does not see
mapped folders, and a forgotten subpackage would silently leave the wheel);
``data_files`` installs outside the package, under a prefix that differs per
install scheme; a symlink inside the package is a plain file in a checkout
without symlinks (git's default on Windows).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("lm_eval_tasks", "hf_dataset")


class BuildPyWithBundledData(build_py):
    """``build_py`` that also copies the bundled folders into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout
            return
        for name in BUNDLED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(
                    source,
                    Path(self.build_lib) / "themisto" / name,
                    dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".cache"),
                )


setup(cmdclass={"build_py": BuildPyWithBundledData})
