"""The replay's working folder as the check after a forked run sees it: what changes it and what does not."""

from __future__ import annotations

import os
from pathlib import Path

from themisto.kernel.inside.fork import folder_signature


def _tree(root: Path) -> None:
    (root / "data" / "deep" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.csv").write_text("x,y\n1,2\n")
    (root / "data" / "b.txt").write_text("b")
    (root / "data" / "deep" / "deeper" / "c.bin").write_bytes(b"\0" * 10)
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the replay's")
    (root / "link-to-folder").symlink_to(outside)
    (root / "link-to-file").symlink_to(root / "a.csv")


def test_every_entry_is_named_by_its_path_beneath_the_root_and_links_are_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "work"
    _tree(root)
    signature = folder_signature(root)
    names = [name for name, *_ in signature]
    assert names == sorted(
        [
            "a.csv",
            "data",
            os.path.join("data", "b.txt"),
            os.path.join("data", "deep"),
            os.path.join("data", "deep", "deeper"),
            os.path.join("data", "deep", "deeper", "c.bin"),
            "empty",
            "link-to-file",
            "link-to-folder",
        ]
    )
    sizes = {name: size for name, _, size, _ in signature}
    assert sizes["a.csv"] == 8 and sizes[os.path.join("data", "deep", "deeper", "c.bin")] == 10
    assert sizes["data"] == 0  # a folder's size moves with its listing's history, not its contents
    assert sizes["link-to-file"] == len(str(root / "a.csv"))  # the link itself


def test_a_change_anywhere_beneath_the_root_changes_it_and_one_outside_does_not(tmp_path: Path) -> None:
    root = tmp_path / "work"
    _tree(root)
    deep = root / "data" / "deep" / "deeper" / "c.bin"
    changes = [
        lambda: deep.write_bytes(b"\0" * 11),  # size
        lambda: os.utime(deep, ns=(0, 12345)),  # modification time
        lambda: deep.chmod(0o600),  # mode
        lambda: (root / "empty" / "new").write_text(""),  # a new file
        lambda: (root / "data" / "b.txt").unlink(),  # a file gone
        lambda: (root / "data" / "deep" / "deeper" / "d").mkdir(),  # a new folder
    ]
    for change in changes:
        before = folder_signature(root)
        change()
        assert folder_signature(root) != before
    before = folder_signature(root)
    (tmp_path / "outside" / "secret.txt").write_text("changed behind a link")
    assert folder_signature(root) == before
