"""vLLM's engine settings shared by the vLLM tests (tests/vllm_backend) and the vLLM benchmark.

vLLM's CPU engine allocates its key/value cache up front (``VLLM_CPU_KVCACHE_SPACE`` GiB): one GiB
holds far more than the few prompts of at most ``MAX_MODEL_LEN`` tokens that the tests score. By default
an engine runs in two more processes (the engine core and a worker), each importing vLLM and torch
again, and compiles the model's graphs: on the loaded 2-core machine a load took 346 s that way and 33 s
in one process without compilation (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the ``uni`` executor,
``enforce_eager``; docs/evaluation.md), which is what the tests use.
"""

from __future__ import annotations

from pathlib import Path

# the model's dtype in both backends: float32, the GGUF's dequantised weights unrounded
DTYPE = "float32"
MAX_MODEL_LEN = 2048
ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}
# the engine in this process, its graphs not compiled
IN_PROCESS = {"enforce_eager": True, "distributed_executor_backend": "uni"}


def engine_args(folder: Path) -> str:
    """lm-eval's ``vllm`` model arguments for an exported folder, as docs/evaluation.md gives them."""
    return f"pretrained={folder},dtype={DTYPE},max_model_len={MAX_MODEL_LEN},enforce_eager=True,distributed_executor_backend=uni"
