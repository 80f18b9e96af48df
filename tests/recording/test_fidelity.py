"""Replay fidelity says what it knows: unknown where nothing was stored, equal after declared normalisations."""

from __future__ import annotations

import pytest

from themisto.recording.fidelity import Fidelity, fidelity, fidelity_form
from themisto.trajectory import Step


def step(number: int, output: str, original: str | None, error: str | None = None) -> Step:
    found = Step("t", number, f"c{number}", "x", output, None, 0.01, 1000, [], f"h{number}", original_output=original)
    found.error = None if error is None else {"ename": error, "evalue": "boom"}
    return found


@pytest.mark.parametrize(
    ("replayed", "stored"),
    [
        ("np.int64(9)", "9"),
        ("(np.float64(0.5), np.int32(-3))", "(0.5, -3)"),
        ("np.True_", "True"),
        ("[np.str_('a'), np.str_('b')]", "['a', 'b']"),
        (
            "CPU times: user 2 ms, sys: 1 ms, total: 3 ms\nWall time: 3.1 ms\n42",
            "CPU times: user 9 s\nWall time: 9 s\n42",
        ),
        (
            "1.2 µs ± 3 ns per loop (mean ± std. dev. of 7 runs, 100000 loops each)",
            "100000 loops, best of 3: 2 µs per loop",
        ),
        ("<Foo object at 0x7f3a1c2b9d90>", "<Foo object at 0x10fe2e8d0>"),
    ],
)
def test_declared_normalisations_make_version_and_run_differences_equal(replayed: str, stored: str) -> None:
    assert replayed != stored and fidelity_form(replayed) == fidelity_form(stored)


@pytest.mark.parametrize(("replayed", "stored"), [("np.int64(9)", "8"), ("9 ms", "8 ms"), ("np.float64(0.5)", "0.25")])
def test_what_the_normalisations_leave_different_stays_different(replayed: str, stored: str) -> None:
    assert fidelity_form(replayed) != fidelity_form(stored)


def test_a_step_without_a_stored_output_is_unknown_not_unequal() -> None:
    steps = [
        step(0, "9", "9"),
        step(1, "np.int64(9)", "9"),
        step(2, "3", "4"),
        step(3, "anything", None),  # stripped: nothing to compare
        step(4, "NameError: boom", "7", error="NameError"),  # the replay invented the error
        step(5, "KeyError: boom", "KeyError: 'a'", error="KeyError"),  # the author saw it too
    ]
    found = fidelity(steps)
    assert found is not None
    assert (found.steps, found.exact, found.norm, found.unknown, found.invented_errors) == (5, 1, 2, 1, 1)
    assert found.first_divergence is not None and found.first_divergence.step == 1
    assert found.first_divergence_norm is not None and found.first_divergence_norm.step == 2
    stripped = fidelity([step(0, "1", None), step(1, "2", None)])
    assert stripped is not None and (stripped.steps, stripped.unknown, stripped.exact_share) == (0, 2, None)
    total = Fidelity.total([found, stripped])
    assert (total.steps, total.exact, total.norm, total.unknown, total.invented_errors) == (5, 1, 2, 3, 1)
    assert fidelity([]) is None
