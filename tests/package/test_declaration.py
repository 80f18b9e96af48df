"""Options declared once: the checks a Python caller meets are the ones the command line meets, flags come from the declaration."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from themisto.cli.options import error_line, option_flags
from themisto.declaration import (
    add_declared_arguments,
    at_least,
    check_declared,
    declarations,
    declared_values,
    option,
    parse_size,
    positive,
    regular_expression,
    within,
)
from themisto.exceptions import OptionError


@dataclass
class Knobs:
    """A small options dataclass in the house style."""

    count: int = option(3, "how many", metavar="N", check=at_least(1))
    rate: float = option(0.5, "a share", check=within(0.0, 1.0))
    wait: float = option(2.0, "seconds", check=positive)
    mode: str = option("fast", "how", choices=("fast", "slow"))
    folder: Path | None = option(None, "where", parse=Path, metavar="DIR")
    loud: bool = option(False, "speak up")
    tidy: bool = option(True, "clean after")
    names: tuple[str, ...] = option((), "extra names", flag="--name", repeatable=True, metavar="NAME")
    label: str | None = option(None, "a label", default_text="the folder's name")
    size: int | None = option(None, "how big", metavar="SIZE", parse=parse_size, check=at_least(1))
    pattern: str = option("", "cells to skip", check=regular_expression)
    plain: int = 7  # undeclared: neither checked nor a flag

    def __post_init__(self) -> None:
        check_declared(self)


def _parser(**helps: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="knobs", exit_on_error=False)
    add_declared_arguments(parser, Knobs, helps=helps)
    return parser


def test_every_check_refuses_a_bad_value_naming_the_option() -> None:
    for change, words in (
        ({"count": 0}, "count must be at least 1, got 0"),
        ({"rate": 1.5}, "rate must be in (0, 1], got 1.5"),
        ({"wait": 0.0}, "wait must be positive, got 0"),
        ({"mode": "medium"}, "mode must be one of fast, slow, got 'medium'"),
    ):
        with pytest.raises(OptionError) as caught:
            Knobs(**change)
        assert str(caught.value) == words
    with pytest.raises(OptionError):
        replace(Knobs(), count=-1)  # replace() builds anew, so it is checked too
    assert Knobs(count=1, rate=1.0, wait=0.1, mode="slow").count == 1


def test_flags_are_generated_with_defaults_in_their_help() -> None:
    parser = _parser()
    text = parser.format_help()
    assert "--count N" in text and "how many (default 3)" in text
    assert "a share (default 0.5)" in text
    assert "--no-tidy" in text and "--tidy" not in text.replace("--no-tidy", "")  # on by default: turned off
    assert "--loud" in text and "speak up (default" not in text  # a switch shows no default
    assert "a label (default the folder's name)" in text
    assert "--plain" not in text
    assert "how many, here (default 3)" in " ".join(_parser(count="how many, here").format_help().split())


def test_parsed_values_hold_only_what_was_given_typed_by_the_declaration() -> None:
    parser = _parser()
    args = parser.parse_args(
        ["--count", "5", "--folder", "x", "--no-tidy", "--loud", "--name", "A", "--name", "B", "--name", "A"]
    )
    given = declared_values(args, Knobs)
    assert given == {"count": 5, "folder": Path("x"), "tidy": False, "loud": True, "names": ("A", "B")}
    assert Knobs(**given).rate == 0.5
    assert declared_values(parser.parse_args([]), Knobs) == {}
    assert declared_values(args, Knobs, names=("count",)) == {"count": 5}


def test_a_bad_value_at_the_command_line_reads_with_the_flag() -> None:
    parser = _parser()
    args = parser.parse_args(["--count", "0"])
    with pytest.raises(OptionError) as caught:
        Knobs(**declared_values(args, Knobs))
    assert error_line(caught.value, option_flags(parser)) == "--count must be at least 1, got 0"


def test_declarations_skip_plain_fields() -> None:
    assert [field.name for field, _ in declarations(Knobs)][:3] == ["count", "rate", "wait"]
    assert "plain" not in {field.name for field, _ in declarations(Knobs)}


def test_a_parser_that_explains_its_refusal_is_one_line_naming_the_flag_and_argparse_keeps_its_own() -> None:
    parser = _parser()
    assert declared_values(parser.parse_args(["--size", "2GiB"]), Knobs) == {"size": 2 * 2**30}
    args = parser.parse_args(["--size", "2gb"])  # two readings: refused when the values are read, not by argparse
    with pytest.raises(OptionError) as caught:
        declared_values(args, Knobs)
    assert error_line(caught.value, option_flags(parser)).startswith("--size '2gb' is not a size such as 512M")
    with pytest.raises(OptionError, match="^size must be at least 1, got 0$"):
        Knobs(**declared_values(parser.parse_args(["--size", "0"]), Knobs))
    with pytest.raises(argparse.ArgumentError, match="invalid int value: 'many'"):
        parser.parse_args(["--count", "many"])  # text of the wrong type stays argparse's usage error


def test_a_pattern_must_compile() -> None:
    with pytest.raises(OptionError, match=r"^pattern must be a regular expression, got 'a\(' \(missing \),"):
        Knobs(pattern="a(")
    assert Knobs(pattern=r"a\(").pattern == r"a\("
