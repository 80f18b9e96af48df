"""vLLM's CPU engine against lm-eval's ``hf`` and ``themisto-hf-shared`` on the same examples, load time apart.

SmolLM2-135M-Instruct exported to a safetensors folder (``python -m themisto.evaluation.local_models
smollm2 --export``), float32, on a build of the bundled trajectories with a 1,000-character history
(``make reference-model``'s), test split: the first examples of the six likelihood arms (group
``themisto_bpb``) and of the six generative tasks (``max_gen_toks`` cut to ``MAX_GEN_TOKS``), each model
loaded once and then timed on the same ``evaluate`` calls. Examples per second and vLLM's ratio to each;
the target, a regression guard: vLLM at least as fast as lm-eval's ``hf`` on generation, where it batches.

vLLM lives in its own environment (``make vllm``, ``.venv-vllm``); ``run`` measures there, in a child
process of that interpreter (``python bench/bench_vllm.py --measure`` prints the figures as JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
CONTEXT_CHARS = 1000
MAX_MODEL_LEN = 4096
MAX_GEN_TOKS = 64
LIMITS = {"bpb": (6, 2), "gen": (3, 1)}  # examples per task: (full, --quick)
GENERATIVE = "themisto,themisto_output_placebo,themisto_next_cell_placebo"
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
TARGET = "vllm >= 1.0x hf (generation)"


def _timed(model: Any, tasks: str, limit: int, data: Path, **kwargs: Any) -> tuple[float, int]:
    """Seconds of one ``evaluate`` of ``model`` on ``tasks`` and the number of examples it scored."""
    from themisto.evaluation.harness import evaluate

    start = time.perf_counter()
    results = evaluate(model, tasks=tasks.split(","), limit=limit, data=str(data), **kwargs)
    seconds = time.perf_counter() - start
    assert results is not None
    return seconds, sum(len(records) for records in results["samples"].values())


def measure(quick: bool) -> dict[str, Any]:
    """Load each model once, time it on the likelihood and generative examples; the figures by model."""
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.vllm_causallms import VLLM

    from themisto.cli import main as themisto_main
    from themisto.evaluation.local_models import SMOLLM2, export
    from themisto.evaluation.shared_prefix import SharedPrefixHFLM

    os.environ.update(ENGINE_ENV)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = export(SMOLLM2, Path(scratch) / "smollm2")
        data = Path(scratch) / "build"
        build = ["build", str(REPO / "data" / "trajectories"), "-o", str(data), "-q"]
        assert themisto_main([*build, "--max-context-chars", str(CONTEXT_CHARS)]) == 0
        loaders = {
            "vllm": lambda: VLLM(
                pretrained=str(folder), dtype="float32", max_model_len=MAX_MODEL_LEN, seed=0,
                enforce_eager=True, distributed_executor_backend="uni",
            ),
            "themisto-hf-shared": lambda: SharedPrefixHFLM(pretrained=str(folder), dtype="float32", device="cpu"),
            "hf": lambda: HFLM(pretrained=str(folder), dtype="float32", device="cpu"),
        }  # fmt: skip
        for name, load in loaders.items():
            start = time.perf_counter()
            model = load()
            figures[name] = {"load_s": time.perf_counter() - start}
            bpb_limit, gen_limit = (limits[1] if quick else limits[0] for limits in (LIMITS["bpb"], LIMITS["gen"]))
            figures[name]["bpb"] = _timed(model, "themisto_bpb", bpb_limit, data)
            gen_kwargs = f"max_gen_toks={MAX_GEN_TOKS}"
            figures[name]["gen"] = _timed(model, GENERATIVE, gen_limit, data, gen_kwargs=gen_kwargs)
            del model
    return figures


def rows(figures: dict[str, Any]) -> list[dict]:
    """The table's rows: examples per second of each model and vLLM's ratio, then the load times."""
    out = []
    for kind, label in (("bpb", "6 likelihood arms (themisto_bpb)"), ("gen", "6 generative tasks")):
        rate = {name: figures[name][kind][1] / figures[name][kind][0] for name in figures}
        n = figures["vllm"][kind][1]
        value = ", ".join(f"{name} {rate[name]:.3f}" for name in rate)
        ratios = ", ".join(f"{rate['vllm'] / rate[name]:.2f}x {name}" for name in rate if name != "vllm")
        out.append(
            {
                "benchmark": "vllm",
                "measure": f"examples/s, {label}, {n} examples",
                "target": TARGET if kind == "gen" else "measured",
                "value": f"{value}; vllm = {ratios}",
                "passed": rate["vllm"] >= rate["hf"] if kind == "gen" else None,
            }
        )
    loads = ", ".join(f"{name} {figures[name]['load_s']:.0f} s" for name in figures)
    out.append(
        {"benchmark": "vllm", "measure": "model load (apart)", "target": "measured", "value": loads, "passed": None}
    )
    return out


def run(quick: bool = False) -> list[dict]:
    """Measure in the vLLM environment's interpreter; its figures as the table's rows."""
    if not VLLM_PYTHON.is_file():
        raise RuntimeError(f"{VLLM_PYTHON} is missing: run make vllm first (make bench does)")
    command = [str(VLLM_PYTHON), str(Path(__file__).resolve()), "--measure", *(["--quick"] if quick else [])]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the vLLM measurement failed:\n{done.stderr[-3000:]}")
    return rows(json.loads(done.stdout.splitlines()[-1]))


if __name__ == "__main__" and "--measure" in sys.argv:
    print(json.dumps(measure(quick="--quick" in sys.argv)))
