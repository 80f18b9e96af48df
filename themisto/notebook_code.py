"""Notebook code parsed for what it names, without the compiler's warnings about it.

The code is the notebook author's: an invalid escape sequence in one of its strings (``re.findall("\\s+", text)``) is
their business, yet ``ast.parse`` warns of it, a ``SyntaxWarning`` printed on every ``themisto build`` from Python
3.12 on (a ``DeprecationWarning`` before). Every parse here names the code :data:`CELL_FILENAME`, and the warnings
filter below ignores those two warnings for that name alone: no other warning is silenced, and a parse pays for no
filter of its own (``warnings.catch_warnings`` per parse would, and is not thread-safe).
"""

from __future__ import annotations

import ast
import re
import warnings

# The file name the compiler gives notebook code parsed here; warnings name it as their module.
CELL_FILENAME = "<notebook cell>"

for _category in (SyntaxWarning, DeprecationWarning):
    warnings.filterwarnings("ignore", category=_category, module=re.escape(CELL_FILENAME) + r"\Z")


def parse_cell(code: str) -> ast.Module:
    """``ast.parse(code)``, quietly; SyntaxError or ValueError (a NUL byte) as it raises them."""
    return ast.parse(code, filename=CELL_FILENAME)


def parse_expression(text: str) -> ast.Expression:
    """``ast.parse(text, mode="eval")``, quietly; SyntaxError or ValueError as it raises them."""
    return ast.parse(text, filename=CELL_FILENAME, mode="eval")
