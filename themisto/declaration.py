"""Options declared once: name, default, help, command-line spelling and validation in one dataclass field.

An options dataclass (:class:`themisto.recording.options.RecordOptions`, the
build's selection and rendering options) declares each field with
:func:`option`; its ``__post_init__`` calls :func:`check_declared`, so a
Python caller and the command line meet the same checks with the same
message, and :func:`add_declared_arguments` generates the argparse flags from
the same declarations (nbclient's traitlets are the model: declared once
with default, help and config). A message names an option by its keyword
(``{max_variables}``); the CLI spells it as the flag that sets it, because
every generated flag's destination is that keyword. Reusable checks
(:func:`at_least`, :func:`positive`, :func:`within`,
:func:`regular_expression`) and parsers (:func:`parse_size`) sit here too.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from themisto.exceptions import InputError, OptionError

# What an option is to a run, beyond what it sets: "environment", where, with what resources and how confined
# a kernel runs (a replay may change it to suit its machine); "trust", how far the kernel is trusted (the
# caller's alone: never saved with a trajectory nor taken from one); "run_control", what a run does with files
# that exist (never saved).
Category = Literal["environment", "trust", "run_control"]
# What is wrong with a value, as the end of a sentence that starts with the option ("must be at least 1"),
# or None when nothing is.
Check = Callable[[Any], str | None]
_KEY = "themisto.option"
# A size: a number and a unit. K, M, G, T alone (any case) and KiB ... TiB are powers of 1024, as in ulimit
# and docker; kB, MB, GB, TB (SI) powers of 1000. KB, mb, gb ... have both readings and are refused.
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:(?P<binary>[KMGTkmgt]|[KMGT](?=iB))(?:iB)?|(?P<decimal>[kMGT])B|B)?")


@dataclass(frozen=True)
class Declared:
    """How one option is explained, spelled at the command line and checked; its default is the field's."""

    help: str  # what the option does; the CLI appends "(default X)" unless ``default_text`` is ""
    flag: str | None = None  # the command-line flag; None: --<name with dashes>, --no-<...> for a True default
    short: str | None = None  # a one-letter alias of the flag (-o)
    metavar: str | None = None
    choices: tuple[str, ...] | None = None  # the values allowed (checked in Python as at the command line)
    # command-line text to value; None: the default's type. Text it refuses with ValueError is argparse's usage
    # error; with InputError (which can explain, as parse_size does), an OptionError naming the option.
    parse: Callable[[str], Any] | None = None
    check: Check | None = None  # beyond choices; None values (unset) are never checked
    default_text: str | None = None  # how help shows the default; None: the default itself; "": not shown
    repeatable: bool = False  # the flag may be given several times, each adding one value to a tuple
    categories: tuple[Category, ...] = ()  # what the option is to a run (see Category)
    # the flag may be given bare, meaning this value, or with a value (argparse's nargs="?"); None: it may not
    bare: Any = None


def option(default: Any, help: str, **declared: Any) -> Any:
    """A dataclass field with its default and its :class:`Declared` explanation, spelling and check.

    A ``default`` of :data:`dataclasses.MISSING` makes the option required (its flag too).
    """
    return dataclasses.field(default=default, metadata={_KEY: Declared(help=help, **declared)})


def declarations(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Declared]]:
    """Each declared field of an options dataclass, in declaration order."""
    for field in dataclasses.fields(cls):
        if _KEY in field.metadata:
            yield field, field.metadata[_KEY]


def declared_names(cls: type, category: Category) -> tuple[str, ...]:
    """The declared options of ``cls`` in ``category``, in declaration order."""
    return tuple(field.name for field, declared in declarations(cls) if category in declared.categories)


def check_declared(instance: object) -> None:
    """Raise :class:`OptionError` naming the first declared option whose value its declaration refuses."""
    for field, declared in declarations(type(instance)):
        value = getattr(instance, field.name)
        if value is None:
            continue
        if declared.choices is not None and value not in declared.choices:
            problem: str | None = f"must be one of {', '.join(declared.choices)}, got {value!r}"
        else:
            problem = None if declared.check is None else declared.check(value)
        if problem is not None:
            raise _refusal(field.name, problem)


def at_least(least: float) -> Check:
    """A check that a number is at least ``least``."""
    return lambda value: None if value >= least else f"must be at least {least:g}, got {value:g}"


def positive(value: float) -> str | None:
    """A check that a number is above zero."""
    return None if value > 0 else f"must be positive, got {value:g}"


def within(low: float, high: float) -> Check:
    """A check that a number lies in (low, high]."""
    return lambda value: None if low < value <= high else f"must be in ({low:g}, {high:g}], got {value:g}"


def regular_expression(value: str) -> str | None:
    """A check that text compiles as a regular expression."""
    try:
        re.compile(value)
    except re.error as exc:
        return f"must be a regular expression, got {value!r} ({exc})"
    return None


def parse_size(text: str) -> int:
    """Bytes in a size: ``512M``, ``2G``, ``1.5GiB`` (powers of 1024), ``500MB``, ``2GB`` (powers of 1000), ``1000000``."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InputError(
            f"{text!r} is not a size such as 512M, 2GiB (powers of 1024) or 500MB (powers of 1000);"
            " KB, mb, gb and the like have two readings"
        )
    unit, base = (match["binary"], 1024) if match["binary"] else (match["decimal"], 1000)
    factor = base ** (" KMGT".index(unit.upper())) if unit else 1
    return int(float(match[1]) * factor)


def flag_of(field: dataclasses.Field[Any], declared: Declared) -> str:
    """The command-line flag of a declared option; a switch that is on by default is turned off by ``--no-...``."""
    if declared.flag is not None:
        return declared.flag
    return ("--no-" if field.default is True else "--") + field.name.replace("_", "-")


def add_declared_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    names: Collection[str] | None = None,
    helps: Mapping[str, str] | None = None,
) -> None:
    """Add a flag for each declared option of ``cls`` (those in ``names``, default all), from its declaration.

    Every flag's parsed value is None unless given, so :func:`declared_values` knows which options the user
    chose; ``helps`` replaces an option's help where one command means something narrower by it (its
    default text is still appended).
    """
    for field, declared in declarations(cls):
        if names is not None and field.name not in names:
            continue
        text = (helps or {}).get(field.name, declared.help)
        shown = _default_text(field, declared)
        help_text = f"{text} (default {shown})" if shown else text
        flags = [*([declared.short] if declared.short else []), flag_of(field, declared)]
        common: dict[str, Any] = {"dest": field.name, "default": None, "help": help_text.replace("%", "%%")}
        if field.default is dataclasses.MISSING:
            common["required"] = True
        if declared.bare is not None:
            parser.add_argument(*flags, nargs="?", const=declared.bare, metavar=declared.metavar, **common)
            continue
        if isinstance(field.default, bool):
            # a switch: given, it sets the value its default is not
            parser.add_argument(*flags, action="store_const", const=not field.default, **common)
            continue
        kind: dict[str, Any] = {"metavar": declared.metavar, "choices": declared.choices}
        if declared.choices is None:
            kind["type"] = _argument_type(declared.parse or _text_type(field.default))
        parser.add_argument(*flags, action="append" if declared.repeatable else "store", **kind, **common)


def declared_values(args: argparse.Namespace, cls: type, names: Collection[str] | None = None) -> dict[str, Any]:
    """The declared options of ``cls`` the user gave on the command line (repeatable ones as tuples).

    Raises :class:`OptionError` naming the first option whose text its parser refused with an explanation.
    """
    values = {}
    for field, declared in declarations(cls):
        if (names is None or field.name in names) and getattr(args, field.name, None) is not None:
            value = getattr(args, field.name)
            for each in value if declared.repeatable else (value,):
                if isinstance(each, _Refused):
                    raise _refusal(field.name, str(each.error))
            values[field.name] = tuple(dict.fromkeys(value)) if declared.repeatable else value
    return values


@dataclass(frozen=True)
class _Refused:
    """Command-line text a declared parser refused with an explanation, kept until :func:`declared_values` raises it.

    argparse would let the InputError escape its parse as a traceback; raised from the command's own run
    instead, it is one line naming the flag, as a check's refusal is.
    """

    error: InputError


def _argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: an InputError it raises becomes a :class:`_Refused` value."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except InputError as exc:
            return _Refused(exc)

    convert.__name__ = getattr(parse, "__name__", "value")  # argparse names the type in its errors: "invalid int value"
    return convert


def _default_text(field: dataclasses.Field[Any], declared: Declared) -> str:
    """How help shows an option's default: its declared text, else the value (switches show none)."""
    if declared.default_text is not None:
        return declared.default_text
    if isinstance(field.default, bool) or field.default in (None, (), dataclasses.MISSING):
        return ""
    return f"{field.default:g}" if isinstance(field.default, float) else str(field.default)


def _text_type(default: object) -> Callable[[str], Any]:
    """How command-line text becomes a value of the default's type (text for an unset default)."""
    return type(default) if isinstance(default, int | float) else str


def _refusal(name: str, problem: str) -> OptionError:
    """The error saying what is wrong with option ``name``: the option, spelled per caller, then ``problem`` verbatim."""
    return OptionError("{" + name + "} " + problem.replace("{", "{{").replace("}", "}}"))
