"""What a cell displays, worked out from a runtime block alone: the positive control's reasoning.

:func:`resolve` takes a cell's code and the variables a runtime block shows
(:func:`themisto.building.prompts.shown_variables`) and returns the cell's output
when the cell is one expression (or one ``print``) that the recorded facts
decide, else None. It never runs the code: it interprets a small, side-effect
free part of Python over values rebuilt from the block:

- a variable whose repr is whole and is a Python literal of its recorded type
  (numbers, strings, bools, None, lists, tuples, dicts, sets) is that value;
  a numpy scalar (``np.float64(0.5)``) is a number with its repr;
- any other variable with a whole repr displays as that repr, and a repr of the
  form ``Name(field=value, ...)`` (dataclasses, named tuples, result objects)
  gives its fields as attributes;
- the recorded facts answer ``len(x)``, ``x.shape``, ``x.ndim``, ``x.size``,
  ``x.nbytes`` (arrays), ``type(x)`` and ``x.dtype`` when the repr spells it
  (``dtype=...`` of an array, ``dtype: ...`` of a Series);
- on those values: literals, names, tuples/lists/sets/dicts, subscripts,
  arithmetic and comparisons on numbers and strings (bounded sizes), a few pure
  builtins (``len``, ``type``, ``str``, ``repr``, ``int``, ``float``, ``round``,
  ``abs``, ``min``, ``max``, ``sum``, ``sorted``, ``bool``), f-strings, and a
  final ``print(...)``.

The result is displayed as Jupyter does: IPython's plain-text pretty printer
(79 columns) for a value, ``str`` joined by spaces for ``print``, nothing for
None, trailing newlines dropped as the recorder drops them.
"""

from __future__ import annotations

import ast
import io
import math
import operator
import re
import tokenize
from collections.abc import Callable, Sequence
from typing import Any, cast

from themisto.notebook_code import parse_cell, parse_expression
from themisto.trajectory import Variable

# Python literal types a variable's recorded type may have for its repr to be read as the value.
_LITERAL_TYPES = {
    "int": int,
    "float": float,
    "complex": complex,
    "str": str,
    "bytes": bytes,
    "bool": bool,
    "NoneType": type(None),
    "list": list,
    "tuple": tuple,
    "dict": dict,
    "set": set,
    "frozenset": frozenset,
}
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int|uint|bool|complex)\w*\((?P<value>[^()]*)\)")
_DTYPE_IN_REPR = re.compile(r"dtype=(?P<array>[\w.]+)\)$|dtype: (?P<series>[\w.\[\], ]+)$")
_ARRAY_TYPES = ("numpy.ndarray", "pandas.DataFrame", "pandas.Series", "pandas.core.frame.DataFrame")
_MAX_ITEMS = 10_000  # strings and sequences an operation may build, in items
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


class Unresolved(Exception):
    """The block does not decide this expression."""


class Shown:
    """A value known by its repr, its number, or both.

    A numpy scalar of the block has both (``np.float64(0.5)`` and 0.5); arithmetic
    on one gives a numpy scalar whose number is known but whose repr (its numpy
    type) is not worked out, so it can be formatted or printed, not displayed.
    """

    def __init__(self, text: str | None, number: float | int | bool | None = None) -> None:
        self.text = text
        self.number = number

    def __repr__(self) -> str:
        if self.text is None:
            raise Unresolved("the repr of a computed numpy scalar")
        return self.text

    def __str__(self) -> str:
        if self.number is None:  # str of an arbitrary object need not be its repr
            raise Unresolved("str of an opaque value")
        return str(self.number)

    def __format__(self, spec: str) -> str:
        if self.number is None:
            raise Unresolved("format of an opaque value")
        return format(self.number, spec)


class Facts:
    """A variable of the block: its recorded facts, and its value when the repr gives it."""

    def __init__(self, variable: Variable) -> None:
        self.variable = variable
        self.value: Any = _value(variable)


_UNKNOWN = object()  # the value of a variable whose repr is cut or not a value


def resolve(code: str, variables: Sequence[Variable]) -> str | None:
    """The output of ``code`` as the recorded variables decide it, else None."""
    try:
        body = parse_cell(code).body
    except (SyntaxError, ValueError):
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Expr) or ends_with_semicolon(code):
        return None
    scope = {variable.name: Facts(variable) for variable in variables}
    expression = body[0].value
    try:
        if isinstance(expression, ast.Call) and isinstance(expression.func, ast.Name) and expression.func.id == "print":
            return _print(expression, scope)
        return _display(_evaluate(expression, scope))
    except (Unresolved, ArithmeticError, TypeError, ValueError, IndexError, KeyError, RecursionError):
        return None


def _display(value: Any) -> str:
    """What Jupyter shows for a cell's result: IPython's plain-text pretty print; nothing for None."""
    from IPython.lib.pretty import pretty

    value = _plain(value)
    if value is None:
        return ""
    return cast(str, pretty(value, max_width=79, max_seq_length=1000))  # type: ignore[no-untyped-call]


def _print(call: ast.Call, scope: dict[str, Facts]) -> str:
    """The text ``print(...)`` writes, trailing newlines dropped as in the recording."""
    options = {keyword.arg: _plain(_evaluate(keyword.value, scope)) for keyword in call.keywords}
    if set(options) - {"sep", "end"} or not all(isinstance(value, str) for value in options.values()):
        raise Unresolved("print to a file or with unknown options")
    words = [str(_plain(_evaluate(argument, scope))) for argument in call.args]
    return cast(str, options.get("sep", " ").join(words) + options.get("end", "\n")).rstrip("\n")


def _plain(value: Any) -> Any:
    """A value as Python sees it: a variable stands for its value (its repr when it is no literal)."""
    if isinstance(value, Facts):
        if value.value is _UNKNOWN:
            raise Unresolved(f"{value.variable.name} has no whole repr")
        return value.value
    return value


def _value(variable: Variable) -> Any:
    """The value the block gives a variable: a literal, a numpy scalar, an opaque repr, or unknown."""
    if variable.repr_truncated or variable.repr_failed:
        return _UNKNOWN
    text = variable.repr
    literal_type = _LITERAL_TYPES.get(variable.type)
    if literal_type is not None:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return _UNKNOWN
        return value if type(value) is literal_type else _UNKNOWN
    scalar = _NUMPY_SCALAR.fullmatch(text)
    if scalar is not None:
        try:
            number = ast.literal_eval(scalar["value"])
        except (ValueError, SyntaxError):
            number = None
        return Shown(text, number if isinstance(number, int | float | bool) else None)
    return Shown(text)


def _evaluate(node: ast.expr, scope: dict[str, Facts]) -> Any:
    """The value of an expression node, or :class:`Unresolved`."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in scope:
            raise Unresolved(f"{node.id} is not in the block")
        return scope[node.id]
    if isinstance(node, ast.Attribute):
        return _attribute(_evaluate(node.value, scope), node.attr)
    if isinstance(node, ast.Call):
        return _call(node, scope)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = [_plain(_evaluate(element, scope)) for element in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items if isinstance(node, ast.List) else set(items)
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise Unresolved("dict unpacking")
        return {
            _plain(_evaluate(key, scope)): _plain(_evaluate(value, scope))
            for key, value in zip(node.keys, node.values)
            if key is not None
        }
    if isinstance(node, ast.Subscript):
        return _subscript(_plain(_evaluate(node.value, scope)), node.slice, scope)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, scope), _evaluate(node.right, scope)
        return _numeric(_arithmetic(node.op, _number(left), _number(right)), left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
        operand = _evaluate(node.operand, scope)
        number = _number(operand)
        if isinstance(node.op, ast.Not):
            return _numeric(not number, operand)
        return _numeric(-number if isinstance(node.op, ast.USub) else +number, operand)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        operands = [_evaluate(node.left, scope), *(_evaluate(right, scope) for right in node.comparators)]
        numbers = [_number(operand) for operand in operands]
        result = all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, numbers, numbers[1:]))
        return _numeric(result, *operands)
    if isinstance(node, ast.JoinedStr):
        return "".join(_formatted(part, scope) for part in node.values)
    raise Unresolved(f"{type(node).__name__} is not interpreted")


def _subscript(container: Any, index: ast.expr, scope: dict[str, Facts]) -> Any:
    """``container[index]`` for literal containers, with slices."""
    if not isinstance(container, list | tuple | dict | str):
        raise Unresolved("subscript of an opaque value")
    if isinstance(index, ast.Slice):
        bounds = [
            None if part is None else _plain(_evaluate(part, scope)) for part in (index.lower, index.upper, index.step)
        ]
        return container[slice(*bounds)]
    return container[_plain(_evaluate(index, scope))]


def _number(value: Any) -> Any:
    """An operand of arithmetic: a plain value, numpy scalars by their number."""
    value = _plain(value)
    if isinstance(value, Shown):
        if value.number is None:
            raise Unresolved("arithmetic on an opaque value")
        return value.number
    return value


def _numeric(result: Any, *operands: Any) -> Any:
    """``result``, as a numpy scalar of unknown repr when an operand was a numpy scalar (numpy would say so)."""
    if any(isinstance(_plain(operand), Shown) for operand in operands):
        return Shown(None, result)
    return result


def _arithmetic(op: ast.operator, left: Any, right: Any) -> Any:
    """``left op right`` with bounded results: no huge powers, strings or sequences."""
    if isinstance(op, ast.Pow) and (not isinstance(right, int | float) or abs(right) > 64):
        raise Unresolved("large power")
    if isinstance(op, ast.Mod) and isinstance(left, str | bytes):
        raise Unresolved("%-formatting")
    if isinstance(op, ast.Mult):
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, str | bytes | list | tuple) and (
                not isinstance(count, int) or len(sequence) * max(count, 0) > _MAX_ITEMS
            ):
                raise Unresolved("large repetition")
    return _BINARY[type(op)](left, right)


def _formatted(part: ast.expr, scope: dict[str, Facts]) -> str:
    """One piece of an f-string: text, or a formatted value with its conversion and spec."""
    if isinstance(part, ast.Constant):
        return str(part.value)
    if not isinstance(part, ast.FormattedValue):
        raise Unresolved("f-string part")
    value = _plain(_evaluate(part.value, scope))
    if part.conversion == ord("r"):
        value = repr(value)
    elif part.conversion == ord("s"):
        value = str(value)
    elif part.conversion == ord("a"):
        value = ascii(value)
    spec = "" if part.format_spec is None else _evaluate(part.format_spec, scope)
    return format(value, spec)


def _attribute(target: Any, name: str) -> Any:
    """An attribute the block records: array facts, or a field of a ``Name(field=value)`` repr."""
    if not isinstance(target, Facts):
        raise Unresolved(f"attribute {name} of a computed value")
    variable = target.variable
    shape = variable.shape
    if name == "shape" and shape is not None:
        return tuple(shape)
    if name == "ndim" and shape is not None:
        return len(shape)
    if name == "size" and shape is not None and variable.type in _ARRAY_TYPES:
        return math.prod(shape)
    if name == "nbytes" and variable.type == "numpy.ndarray" and variable.size_bytes is not None:
        return variable.size_bytes
    if name == "dtype" and not variable.repr_truncated:
        found = _DTYPE_IN_REPR.search(variable.repr)
        if found is not None:
            return Shown(f"dtype('{found['array'] or found['series']}')")
    fields = _repr_fields(target.value)
    if name in fields:
        return fields[name]
    raise Unresolved(f"{variable.name}.{name} is not recorded")


def _repr_fields(value: Any) -> dict[str, Any]:
    """The keyword fields of a ``Name(field=value, ...)`` repr, each a literal or a repr."""
    if not isinstance(value, Shown) or value.text is None:
        return {}
    try:
        call = parse_expression(value.text).body
    except (SyntaxError, ValueError):
        return {}
    if not isinstance(call, ast.Call) or call.args:
        return {}
    fields: dict[str, Any] = {}
    for keyword in call.keywords:
        text = ast.get_source_segment(value.text, keyword.value)
        if keyword.arg is None or text is None:
            continue
        try:
            fields[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, SyntaxError, TypeError):
            fields[keyword.arg] = _value(Variable(keyword.arg, "object", None, text))
    return fields


# Pure builtins on plain values; those in _NUMERIC return a numpy scalar when given one.
_BUILTINS: dict[str, Callable[..., Any]] = {
    "len": len,
    "str": str,
    "repr": repr,
    "int": int,
    "float": float,
    "bool": bool,
    "round": round,
    "abs": abs,
    "min": min,
    "max": max,
    "sum": sum,
    "sorted": sorted,
}
_NUMERIC = ("round", "abs", "min", "max", "sum")


def _call(node: ast.Call, scope: dict[str, Facts]) -> Any:
    """A call of a pure builtin; ``len`` and ``type`` of a variable read its recorded facts."""
    if not isinstance(node.func, ast.Name) or node.func.id in scope or node.keywords:
        raise Unresolved("call of something other than a pure builtin")
    name = node.func.id
    arguments = [_evaluate(argument, scope) for argument in node.args]
    if name in ("len", "type") and len(arguments) == 1 and isinstance(arguments[0], Facts):
        variable = arguments[0].variable
        if name == "type":
            return Shown(f"<class '{variable.type}'>")
        if variable.len is not None:
            return variable.len
    if name not in _BUILTINS:
        raise Unresolved(f"{name}() is not interpreted")
    values = [_plain(argument) for argument in arguments]
    if any(len(value) > _MAX_ITEMS for value in values if isinstance(value, list | tuple | dict | set | str)):
        raise Unresolved("large argument")
    if name in _NUMERIC or name in ("int", "float", "bool"):
        numbers = [_number(value) for value in values]
        result = _BUILTINS[name](*numbers)
        return result if name not in _NUMERIC else _numeric(result, *values)
    return _BUILTINS[name](*values)


def ends_with_semicolon(code: str) -> bool:
    """Whether the last token, comments aside, is ``;``: IPython then shows no result."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code.rstrip().endswith(";")
    meaningful = [token for token in tokens if token.type not in _LAYOUT_TOKENS]
    return bool(meaningful) and meaningful[-1].string == ";"


_LAYOUT_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
