"""A benchmark row without a target is informational; run_all's verdict fails only target rows left without one."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from repository import REPOSITORY


def _bench(name: str) -> ModuleType:
    """A module of bench/ loaded as run_all loads it, bench/ on sys.path for its own imports."""
    sys.path.insert(0, str(REPOSITORY / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(f"themisto_test_{name}", REPOSITORY / "bench" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPOSITORY / "bench"))


def test_vllm_rows_fail_only_where_they_hold_a_target() -> None:
    run_all, vllm = _bench("run_all"), _bench("bench_vllm")
    figures = {
        name: {"load_s": 1.0, "bpb": (10.0, 5), "gen": (10.0, 5 if name == "vllm" else 2)}
        for name in ("vllm", "themisto-hf-shared", "hf")
    }
    verdicts = {row["measure"]: run_all.verdict(row)["passed"] for row in vllm.rows(figures)}
    # the generation row has its target and passes (vLLM 0.5/s against hf's 0.2/s); the rate and load rows
    # have none, and a target spelled "-" made them count as failed
    assert list(verdicts.values()) == [None, True, None], verdicts
    assert run_all.verdict({"target": "<= 1x", "passed": None})["passed"] is False
