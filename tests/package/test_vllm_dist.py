"""tools/vllm_dist.py: the metadata-only ``vllm`` distribution that gives vLLM's CPU build the name lm-eval looks up.

``make vllm`` runs it in the vLLM environment, where ``make test-vllm`` exercises it through lm-eval's
``vllm`` model; here it writes into a scratch folder that ``importlib.metadata`` reads as site-packages.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from tools.vllm_dist import shim_version, write_dist


def _version(site: Path) -> str:
    """The version of ``vllm`` that importlib.metadata finds in ``site``, as lm-eval looks it up."""
    (dist,) = importlib.metadata.distributions(name="vllm", path=[str(site)])
    return dist.version


def test_the_cpu_builds_version_gets_the_cpu_label_vllm_looks_for() -> None:
    assert shim_version("0.32.0") == "0.32.0+cpu"
    assert shim_version("0.32.0+cpu") == "0.32.0+cpu"
    assert shim_version("0.32.0+abc") == "0.32.0+cpu"


def test_the_shim_is_found_by_name_and_replaced_by_a_newer_one(tmp_path: Path) -> None:
    first = write_dist(tmp_path, "0.32.0+cpu")
    assert _version(tmp_path) == "0.32.0+cpu"
    assert sorted(line.split(",")[0] for line in (first / "RECORD").read_text().splitlines()) == sorted(
        f"{first.name}/{file.name}" for file in first.iterdir()
    )  # pip uninstall removes exactly what it lists
    write_dist(tmp_path, "0.33.0+cpu")
    assert _version(tmp_path) == "0.33.0+cpu" and not first.exists()


def test_a_real_vllm_distribution_is_left_alone(tmp_path: Path) -> None:
    real = tmp_path / "vllm-0.11.0.dist-info"
    real.mkdir()
    (real / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\n")
    (real / "INSTALLER").write_text("pip\n")
    with pytest.raises(FileExistsError, match="a vllm distribution is installed already"):
        write_dist(tmp_path, "0.32.0+cpu")
    assert _version(tmp_path) == "0.11.0"
