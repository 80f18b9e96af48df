"""``snapshot.installed_version`` reads the version ``importlib.metadata.version`` reads, without parsing the whole
metadata file."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from themisto.kernel.inside.snapshot import installed_version


def test_every_installed_distribution_reads_the_same_version() -> None:
    names = {distribution.metadata["Name"] for distribution in importlib.metadata.distributions()}
    assert len(names) > 50  # the test environment's own, numpy and pandas among them
    for name in sorted(names):
        assert installed_version(name) == importlib.metadata.version(name), name


# METADATA texts as an installer could leave them: the first Version header of the header block counts
CASES = {
    "a Version line in the description": "Metadata-Version: 2.1\nName: {name}\nVersion: 1.2\n\nVersion: 9.9\n",
    "a folded header": "Metadata-Version: 2.1\nName: {name}\nVersion: 1.2\n  .post3\nSummary: s\n\nbody\n",
    "two Version headers": "Metadata-Version: 2.1\nName: {name}\nversion: 1.2 \nVersion: 3.4\n\n",
    "no Version header": "Metadata-Version: 2.1\nName: {name}\n\nVersion: 9.9\n",
    "tabs and CRLF": "Metadata-Version: 2.1\r\nName: {name}\r\nVersion:\t1.2\r\n\r\nVersion: 9.9\r\n",
    "CRLF, no Version header": "Metadata-Version: 2.1\r\nName: {name}\r\n\r\nVersion: 9.9\r\n",
}


@pytest.mark.parametrize("metadata", list(CASES.values()), ids=list(CASES))
def test_a_metadata_file_reads_as_importlib_reads_it(
    metadata: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "themisto_made_up_distribution"
    info = tmp_path / f"{name}-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(metadata.format(name=name).encode("utf-8"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_version(name) == importlib.metadata.version(name)


def test_an_egg_info_reads_its_pkg_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "themisto_made_up_egg.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: themisto_made_up_egg\nVersion: 0.7\n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_version("themisto_made_up_egg") == "0.7" == importlib.metadata.version("themisto_made_up_egg")


def test_a_missing_distribution_raises_as_importlib_does() -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        installed_version("themisto-no-such-distribution")
