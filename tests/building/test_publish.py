"""The dataset card the Hub reads, and ``themisto publish``: a complete build checked, then one commit.

No test reaches the Hub. ``--dry-run`` and the commit operations are checked
directly; the upload itself runs the real CLI and huggingface_hub against a
local HTTP server standing in for the Hub (``HF_ENDPOINT``), which answers
the four Hub API calls a commit of regular files makes and records them.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest
from dataset_fixture import write_dataset
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData
from repository import REPOSITORY

from themisto.building.card import ARXIV_ID, CITATION, hub_licenses
from themisto.building.card_reading import BUILD_OPTIONS_KEY, TASKS_KEY, parquet_path, read_build_options
from themisto.building.publish import build_files, commit_operations
from themisto.building.tables import config_features, config_splits
from themisto.cli import main
from themisto.vocabulary import BASELINES, CONFIG_NAMES, LM_EVAL_TASKS

TOKEN = "hf_TESTsecretTOKENvalue0123456789"  # a made-up token: the tests check it is never printed


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("build") / "hf_dataset")


@pytest.fixture
def copy(build: Path, tmp_path: Path) -> Path:
    """A build of one's own to damage."""
    return Path(shutil.copytree(build, tmp_path / "hf_dataset"))


def data_files(folder: Path) -> list[str]:
    """Every Parquet file of a build, relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.parquet"))


# --- the card ------------------------------------------------------------------------------


def test_the_hub_parses_the_card_with_license_paper_features_and_split_sizes(build: Path) -> None:
    card = DatasetCard.load(build / "README.md")  # a local path: huggingface_hub parses it offline
    data = card.data
    assert data.license == "apache-2.0" and data.license in hub_licenses()
    assert data.pretty_name == "Themisto"
    assert data.task_categories == ["text-generation"]
    assert f"arxiv:{ARXIV_ID}" in data.tags and "jupyter" in data.tags
    # the Hub's own keys, and two of Themisto's that the card explains
    # tags: a key of every card (CardData), not a parameter of the dataset card class
    standard = set(inspect.signature(DatasetCardData.__init__).parameters) | {"configs", "dataset_info", "tags"}
    assert set(data.to_dict()) - standard == {BUILD_OPTIONS_KEY, TASKS_KEY}
    assert f"`{BUILD_OPTIONS_KEY}`" in card.text and f"`{TASKS_KEY}`" in card.text
    assert "apache-2.0 covers this build" in card.text and "Zenodo 14861889" in card.text
    assert [config["config_name"] for config in data.configs] == list(CONFIG_NAMES)
    infos = DatasetInfosDict.from_dataset_card_data(data)
    assert sorted(infos) == sorted(CONFIG_NAMES)
    for config in CONFIG_NAMES:
        info = infos[config]
        assert info.features == config_features(config)
        assert list(info.splits) == list(config_splits(config))
        for split in config_splits(config):
            path = parquet_path(build, config, split)
            assert info.splits[split].num_examples == pq.read_metadata(path).num_rows
            assert info.splits[split].num_bytes > 0
        assert info.download_size == sum(parquet_path(build, config, s).stat().st_size for s in config_splits(config))
    # the prose stays below the YAML, and the options block still reads back
    assert card.text.lstrip().startswith("# Themisto: a Jupyter runtime benchmark")
    assert BUILD_OPTIONS_KEY in data.to_dict()
    read_build_options(build)


def test_load_dataset_checks_the_split_sizes_the_card_states(copy: Path, tmp_path: Path) -> None:
    card = copy / "README.md"
    text = card.read_text(encoding="utf-8")
    rows = pq.read_metadata(parquet_path(copy, "output_prediction", "test")).num_rows
    # a card that promises one row more than the file holds: load_dataset refuses it
    config_block = text.split("- config_name: output_prediction\n  features:")[1].split("- config_name:")[0]
    wrong = config_block.replace(f"num_examples: {rows}\n", f"num_examples: {rows + 1}\n", 1)
    assert wrong != config_block
    card.write_text(text.replace(config_block, wrong), encoding="utf-8")
    with pytest.raises(datasets.exceptions.NonMatchingSplitsSizesError):
        datasets.load_dataset(str(copy), "output_prediction", split="test", cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("license_id", ["cc-by-4.0: see Zenodo", "CC-BY-4.0", "apache 2.0", ""])
def test_a_license_the_hub_does_not_know_is_one_line_and_nothing_is_built(
    license_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trajectories = REPOSITORY / "data" / "trajectories"
    out = tmp_path / "out"
    assert main(["build", str(trajectories), "-o", str(out), "--license", license_id]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("themisto build: error:") and "license" in err
    assert not out.exists()


@pytest.mark.slow
def test_a_hub_license_with_yaml_syntax_is_written_as_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "openrail++" and "cc0-1.0" would break hand-written YAML flow; the card stays valid
    for license_id in ("openrail++", "cc0-1.0", "other"):
        out = tmp_path / license_id
        assert main(["build", str(REPOSITORY / "data" / "trajectories"), "-o", str(out), "--license", license_id]) == 0
        assert DatasetCard.load(out / "README.md").data.license == license_id
        assert read_build_options(out)[2] == license_id


def test_the_license_list_is_the_hubs_published_one_shipped_as_data() -> None:
    from importlib import resources

    lines = resources.files("themisto.building").joinpath("hub_licenses.txt").read_text().splitlines()
    identifiers = [line for line in lines if line and not line.startswith("#")]
    assert len(identifiers) == len(set(identifiers)) == len(hub_licenses()) > 60
    assert {"apache-2.0", "cc-by-4.0", "mit", "other", "unknown"} <= hub_licenses()
    assert all(re.fullmatch(r"[a-z0-9.+-]+", name) for name in identifiers)
    assert any("huggingface.co/docs/hub/repositories-licenses" in line for line in lines if line.startswith("#"))


def test_the_card_says_what_its_sessions_are_and_how_to_evaluate(tmp_path: Path) -> None:
    assert main(["build", str(REPOSITORY / "data" / "trajectories"), "-o", str(tmp_path / "bundled")]) == 0
    text = DatasetCard.load(tmp_path / "bundled" / "README.md").text
    assert "simulated sessions, not logs of real people" in text and "tools/corpus/make_logs.py" in text
    trajectories = sorted((REPOSITORY / "data" / "trajectories").glob("*.jsonl"))
    sessions = {
        json.loads(path.with_name(path.stem + ".provenance.json").read_text())["source"]["name"]
        for path in trajectories
    }
    assert f"the {len(sessions)} sessions of this build gave {len(trajectories)} trajectories" in text
    assert len(sessions) < len(trajectories)  # the bundled corpus has sessions that ran several kernels
    evaluate = text.split("## Evaluate\n", 1)[1].split("\n## ", 1)[0]
    for needed in ("pip install themisto", "lm_eval --include_path", "themisto eval --model", "exact_match_norm"):
        assert needed in evaluate, needed
    assert "themisto_bpb" in evaluate and "$(themisto tasks-path)" in evaluate
    assert all(f"`{name}`" in evaluate for name in [*BASELINES, *LM_EVAL_TASKS, *LM_EVAL_TASKS.values()])


def test_the_paper_has_one_citation_form() -> None:
    readme = (REPOSITORY / "lm_eval_tasks" / "themisto" / "README.md").read_text(encoding="utf-8")
    assert f"```bibtex\n{CITATION}\n```" in readme


# --- the one data rule -----------------------------------------------------------------------


def test_a_card_with_invalid_yaml_is_one_line_for_every_command(
    copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    card = copy / "README.md"
    card.write_text(card.read_text(encoding="utf-8").replace("license: apache-2.0", "license: [apache", 1))
    commands = [
        ["show", "output_prediction", "nb-arith/3", "--data", str(copy)],
        ["eval", "--model", "themisto-empty", "-o", str(tmp_path / "run"), "--data", str(copy)],
        ["publish", "me/themisto", "--dry-run", "--data", str(copy)],
    ]
    for command in commands:
        capsys.readouterr()
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"themisto {command[0]}: error:") and "YAML is invalid" in err[-1], err
        assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "run").exists()


def test_a_corrupt_parquet_file_under_show_is_one_line(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = parquet_path(copy, "output_prediction", "test")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert main(["show", "output_prediction", "nb-arith/3", "--data", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a readable Parquet file" in err and str(path) in err


# --- publish --------------------------------------------------------------------------------


def expected_upload(build: Path, path: str, repo_id: str = "my-org/themisto") -> bytes:
    """What goes up for ``path``: the file's bytes; the card with the repository id in its usage snippet."""
    content = (build / path).read_bytes()
    if path == "README.md":
        assert content.count(b'load_dataset("<org>/themisto"') == 1
        content = content.replace(b'"<org>/themisto"', f'"{repo_id}"'.encode())
    return content


def test_the_commit_holds_the_card_and_exactly_the_files_it_names(build: Path) -> None:
    (build.parent / "notes.txt").write_text("not part of the build\n")  # outside: never listed
    files = build_files(build)
    operations = commit_operations(files, "my-org/themisto")
    paths = [operation.path_in_repo for operation in operations]
    assert paths[0] == "README.md" and sorted(paths[1:]) == data_files(build)
    for operation, file in zip(operations, files):
        with operation.as_file() as content:
            uploaded = content.read()
        assert uploaded == expected_upload(build, operation.path_in_repo)
        assert operation.upload_info.size == len(uploaded)
        if file.rows is not None:
            assert file.size == len(uploaded) and file.rows == pq.read_metadata(build / file.path_in_repo).num_rows
    assert b'load_dataset("my-org/themisto", "output_prediction_runtime"' in expected_upload(build, "README.md")


def test_dry_run_lists_every_file_and_makes_no_network_call(
    build: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a network connection was attempted")

    # no token, and no socket may connect: a network call would fail the command
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    assert main(["publish", "my-org/themisto", "--data", str(build), "--dry-run", "--private", "--revision", "v1"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == "would create or reuse the private dataset my-org/themisto and commit to v1:"
    listed = [line.split()[0] for line in lines[1:-1]]
    card_order = [
        parquet_path(build, config, split).relative_to(build).as_posix()
        for config in CONFIG_NAMES
        for split in config_splits(config)
    ]
    assert listed == ["README.md", *card_order]
    total = sum(len(expected_upload(build, path, "my-org/themisto")) for path in listed)
    assert lines[-1] == f"{len(listed)} files, {total} bytes in one commit"
    assert f"{build.resolve()} (from --data)" in captured.err


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("delete", "missing; the build is incomplete"),
        ("truncate", "not a readable Parquet file"),
        ("drop_config", "incomplete build, the card names no file for next_cell_prediction/full"),
        ("escape", "lies outside the build folder"),
        ("link_card", "README.md: a symbolic link in the build"),
        ("link_data", "a symbolic link in the build"),
        ("link_folder", "next_cell_prediction: a symbolic link in the build"),
    ],
)
def test_an_incomplete_or_damaged_build_is_refused_before_any_upload(
    damage: str, message: str, copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    card = copy / "README.md"
    target = parquet_path(copy, "next_cell_prediction", "full")
    named = target.relative_to(copy).as_posix()  # the path the card gives
    if damage == "delete":
        target.unlink()
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:100])
    elif damage == "drop_config":
        card.write_text(card.read_text().replace(f"  - split: full\n    path: {named}\n", ""))
    elif damage == "escape":  # the card names a file outside the build: a secret next to it must never go up
        (copy.parent / "secret.parquet").write_bytes(target.read_bytes())
        card.write_text(card.read_text().replace(f"path: {named}", "path: ../secret.parquet"))
    else:  # the same file, reached through a link: what the link points to would go up under its name
        kept = {"link_card": card, "link_data": target, "link_folder": target.parent}[damage]
        moved = copy.parent / f"outside-{kept.name}"
        kept.rename(moved)
        kept.symlink_to(moved, target_is_directory=moved.is_dir())
    assert main(["publish", "my-org/themisto", "--data", str(copy), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize("repo_id", ["themisto", "a/b/c", "my org/themisto", "my-org/the--misto"])
def test_a_bad_repo_id_is_one_line(repo_id: str, build: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["publish", repo_id, "--data", str(build), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("themisto publish: error:")


class FakeHub(BaseHTTPRequestHandler):
    """The Hub API calls of a commit of regular files, answered and recorded in ``calls``."""

    calls: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.calls.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        parts = self.path.split("?")[0].strip("/").split("/")
        endpoint = f"http://{self.headers['Host']}"
        if parts[:3] == ["api", "repos", "create"]:
            name = json.loads(body)
            reply: dict[str, Any] = {"url": f"{endpoint}/datasets/{name['organization']}/{name['name']}"}
        elif parts[:2] == ["api", "validate-yaml"]:
            reply = {"errors": [], "warnings": []}
        elif parts[:2] == ["api", "datasets"] and parts[4] == "branch":
            reply = {}
        elif parts[:2] == ["api", "datasets"] and parts[4] == "preupload":
            files = json.loads(body)["files"]
            reply = {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
        elif parts[:2] == ["api", "datasets"] and parts[4] == "commit":
            reply = {"commitUrl": f"{endpoint}/datasets/{parts[2]}/{parts[3]}/commit/{'a' * 40}", "commitOid": "a" * 40}
        else:
            self.send_error(404)
            return
        payload = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def fake_hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    FakeHub.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_publish(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real ``themisto publish`` in a fresh interpreter (huggingface_hub reads HF_ENDPOINT at import)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | env
    command = [sys.executable, "-m", "themisto", "publish", *args]
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=120, cwd=REPOSITORY)


@pytest.mark.slow
def test_publish_uploads_the_whole_build_in_one_commit_with_the_token_from_the_environment(
    build: Path, fake_hub: str
) -> None:
    done = run_publish(
        "my-org/themisto", "--data", str(build), "--private", "--revision", "v1",
        env={"HF_ENDPOINT": fake_hub, "HF_TOKEN": TOKEN},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    assert f"{fake_hub}/datasets/my-org/themisto/commit/" in done.stdout
    assert 'load_dataset("my-org/themisto"' in done.stdout

    calls = FakeHub.calls
    assert all(call["auth"] == f"Bearer {TOKEN}" for call in calls)  # every call authenticated, by HF_TOKEN
    create = [call for call in calls if call["path"] == "/api/repos/create"]
    assert len(create) == 1
    assert json.loads(create[0]["body"]) == {
        "name": "themisto", "organization": "my-org", "visibility": "private", "type": "dataset"
    }  # fmt: skip
    assert any(call["path"] == "/api/datasets/my-org/themisto/branch/v1" for call in calls)
    commits = [call for call in calls if "/commit/" in call["path"]]
    assert len(commits) == 1 and commits[0]["path"].startswith("/api/datasets/my-org/themisto/commit/v1")
    lines = [json.loads(line) for line in commits[0]["body"].splitlines()]
    assert lines[0]["key"] == "header"
    uploaded = {line["value"]["path"]: base64.b64decode(line["value"]["content"]) for line in lines[1:]}
    assert sorted(uploaded) == sorted(["README.md", *data_files(build)])
    for path, content in uploaded.items():
        assert content == expected_upload(build, path), path


@pytest.mark.slow
def test_publish_failures_are_one_line_and_never_show_the_token(build: Path, tmp_path: Path) -> None:
    # nothing listens on the endpoint: the first call fails
    done = run_publish(
        "my-org/themisto", "--data", str(build), env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": TOKEN}
    )
    assert done.returncode == 2 and TOKEN not in done.stdout + done.stderr
    err = done.stderr.strip().splitlines()
    assert err[-1].startswith("themisto publish: error: publishing to my-org/themisto failed")
    assert "Traceback" not in done.stderr
    # no token at all: refused before any call, even with a login cached in HF_HOME
    home = tmp_path / "hf_home"
    home.mkdir()
    (home / "token").write_text(TOKEN)
    done = run_publish(
        "my-org/themisto", "--data", str(build), env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(home)}
    )
    assert done.returncode == 2 and "set HF_TOKEN" in done.stderr and TOKEN not in done.stderr
