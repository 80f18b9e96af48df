"""Benchmark rows: one without a target is informational (run_all fails only target rows left without one); the
build's linearity row holds CPU time to its target and fails where it has no ratio to take."""

from __future__ import annotations

from typing import Any

from repository import bench_module


def test_vllm_rows_fail_only_where_they_hold_a_target() -> None:
    run_all, vllm = bench_module("run_all"), bench_module("bench_vllm")
    figures = {
        name: {"load_s": 1.0, "bpb": (10.0, 5), "gen": (10.0, 5 if name == "vllm" else 2)}
        for name in ("vllm", "themisto-hf-shared", "hf")
    }
    verdicts = {row["measure"]: run_all.verdict(row)["passed"] for row in vllm.rows(figures)}
    # the generation row has its target and passes (vLLM 0.5/s against hf's 0.2/s); the rate and load rows
    # have none, and a target spelled "-" made them count as failed
    assert list(verdicts.values()) == [None, True, None], verdicts
    assert run_all.verdict({"target": "<= 1x", "passed": None})["passed"] is False


def test_build_linearity_is_guarded_on_cpu_time_and_fails_without_a_ratio() -> None:
    build = bench_module("bench_build")
    measured = build.Measurement
    fixed = measured(wall=5.6, cpu=3.0, peak_rss=0)
    peaks = {2_000: 1 << 29, 20_000: 1 << 29}

    def linearity(one: Any, ten: Any) -> dict:
        return build.rows(fixed, one, ten, peaks, 2_000, 20_000)[-1]

    # a 2,000-step build whose wall fell below the fixed cost's made the wall ratio negative, and it passed
    noisy_wall = linearity(measured(5.3, 4.0, 0), measured(24.0, 13.0, 0))
    assert noisy_wall["passed"] is True and "10.0x CPU" in noisy_wall["value"], noisy_wall
    assert "not above the fixed cost" in noisy_wall["value"]
    superlinear = linearity(measured(7.0, 4.0, 0), measured(30.0, 15.0, 0))
    assert superlinear["passed"] is False and "12.0x CPU" in superlinear["value"], superlinear
    no_ratio = linearity(measured(7.0, 2.9, 0), measured(30.0, 15.0, 0))
    assert no_ratio["passed"] is False and no_ratio["value"].startswith("not measured"), no_ratio
