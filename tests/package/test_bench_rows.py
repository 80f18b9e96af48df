"""Benchmark rows: one without a target is informational (run_all fails only target rows left without one); the
build's linearity row holds CPU time to its target and fails where it has no ratio to take; the exec bench's two
sides take turns a step each, are timed on their own turns alone, and a cell one side ran slowly does not outweigh
the forks."""

from __future__ import annotations

import threading
import time
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


def test_exec_sides_alternate_a_step_each_and_count_only_their_own_turns() -> None:
    lockstep = bench_module("bench_exec")._Lockstep
    turns, order = lockstep(("scoring", "replay")), []
    pause = {"scoring": 0.002, "replay": 0.02}

    def side(name: str, steps: int) -> None:
        turns.begin(name)
        for _ in range(steps):
            order.append(name)
            time.sleep(pause[name])
            turns.step(name)
        turns.end(name)

    # the scoring side ends first: the replay runs its last steps alone, without waiting for a turn never given
    threads = [threading.Thread(target=side, args=pair) for pair in (("replay", 5), ("scoring", 3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert order == ["scoring", "replay"] * 3 + ["replay"] * 2, order
    # each side's own sleeps, not the other's: the scoring's 3 x 2 ms would read past 60 ms if it counted the waits
    seconds = {side: sum(times) for side, times in turns.turns.items()}
    assert 0.006 <= seconds["scoring"] < 0.05, turns.turns
    assert 0.1 <= seconds["replay"] < 0.3, turns.turns
    # a turn a step, and the end of each side its own last turn
    assert [len(times) for times in turns.turns.values()] == [4, 6]


def test_exec_excess_counts_forked_steps_and_ridden_runs_whole_and_a_shared_shift_but_not_one_slow_cell() -> None:
    excess = bench_module("bench_exec")._excess
    replay = [0.5] + [0.1] * 40 + [0.05]  # the kernel's start with the first cell, 40 cells, its end
    forked = {10, 20}
    scoring = list(replay)
    for step in forked:
        scoring[step] += 0.03  # the forked runs
    assert abs(excess(scoring, replay, forked, {}) - 0.06) < 1e-9
    # one cell the machine ran 0.8 s slower on the scoring's side, another 0.5 s slower on the replay's
    noisy = list(scoring)
    noisy[5] += 0.8
    replay_noisy = list(replay)
    replay_noisy[30] += 0.5
    assert abs(excess(noisy, replay_noisy, forked, {}) - 0.06) < 1e-9
    # every cell 2 ms slower after the forks (the faults they leave): counted, 38 cells of them
    shifted = [time + (0.002 if 0 < step < 41 and step not in forked else 0.0) for step, time in enumerate(scoring)]
    assert abs(excess(shifted, replay, forked, {}) - (0.06 + 38 * 0.002)) < 1e-9
    # the two steps right after the forks, 40 ms slower each: kept apart from the rest, not trimmed away
    after = [time + (0.04 if step in (11, 21) else 0.0) for step, time in enumerate(scoring)]
    assert abs(excess(after, replay, forked, {}) - 0.14) < 1e-9
    # the kernels' starts count whole
    assert abs(excess([0.9, *scoring[1:]], replay, forked, {}) - 0.46) < 1e-9
    # runs that ride on the request of the cell before their step: their kernel time counts whole, not trimmed away
    # (two of 38 steps), and the rest of that step's difference as a step's with none: a slow cell there is not
    ridden = [time + (0.03 if step + 1 in forked else 0.0) for step, time in enumerate(replay)]
    ridden[9] += 0.6
    assert abs(excess(ridden, replay, forked, {9: 0.03, 19: 0.03}) - 0.06) < 1e-9
    # nor a shift that every step after its predictions shares, which the kernel's clock misses
    shared = [time + (0.002 if 0 < step < 41 and step not in forked else 0.0) for step, time in enumerate(ridden)]
    assert abs(excess(shared, replay, forked, {9: 0.03, 19: 0.03}) - (0.06 + 38 * 0.002)) < 1e-9
