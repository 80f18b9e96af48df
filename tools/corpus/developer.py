"""Simulated developers: a scenario's notebook plan played with one person's habits.

A scenario module (:mod:`tools.corpus.scenarios`) writes its notebook as plain code through a
:class:`Developer`: ``dev.imports(...)``, ``dev.cell(code, ...)``,
``dev.section(title)``. The developer decides, with a ``random.Random`` seeded
by the session name, how that plan turns into executions:

- names and style: the plan's canonical variable names are renamed to the
  persona's (``df`` may become ``sales``), ``.head()`` gets the persona's row
  count, ``.round(2)`` its digits, a final expression may be printed;
- mistakes: a slip (a misspelt variable, method or column) or one of the
  plan's own wrong versions runs first, fails, and is fixed;
- development: a result shown in a separate cell after the one that computes
  it, edited re-runs, unchanged re-runs, re-runs of earlier cells (out of
  order, sometimes re-applying an in-place change), throwaway check cells that
  get deleted, interrupted long cells, forgotten imports added to the first
  cell, kernel restarts followed by Run All, by a re-run of the top cells, or
  by nothing (then a NameError sends the developer back to the cell that
  defines the missing name).
"""

from __future__ import annotations

import ast
import io
import keyword
import random
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from tools.corpus.notebook import Cell, Notebook

Edit = tuple[str, str]  # (text in the cell, replacement)

AFTER_RESTART = ("all", "top", "lazy")
# Methods that change their object rather than return a new one.
IN_PLACE_METHODS = {"append", "extend", "update", "setdefault", "pop", "insert", "remove", "clear", "sort"}
NAME_ERROR = re.compile(r"name '(\w+)' is not defined")
# Misspellings people really make, tried before a generic one.
COMMON_SLIPS = {
    "columns": "colums",
    "value_counts": "value_count",
    "sort_values": "sort_value",
    "groupby": "group_by",
    "reset_index": "reset_indx",
    "to_datetime": "to_date",
    "describe": "describes",
    "unique": "uniques",
    "nunique": "nuniques",
    "astype": "as_type",
    "shape": "shapes",
    "isna": "isnan",
    "fillna": "fill_na",
    "mean": "avg",
    "apply": "aply",
    "merge": "marge",
    "pivot_table": "pivottable",
    "rolling": "roling",
    "resample": "resamples",
    "strip": "trim",
    "lower": "lowercase",
    "append": "push",
    "reshape": "reshap",
    "tolist": "to_list_",
    "items": "iteritems",
    "json_normalize": "normalize_json",
}
# Generic edits a developer makes to look at a result differently: (pattern, replacement).
GENERIC_TWEAKS: tuple[tuple[str, str], ...] = (
    (r"\.head\(\d*\)$", ".head(12)"),
    (r"\.value_counts\(\)$", ".value_counts(normalize=True).round(3)"),
    (r"\.describe\(\)$", ".describe().T"),
    (r"\.round\(2\)$", ".round(1)"),
    (r"\.round\(3\)$", ".round(2)"),
    (r"\.sort_values\(\)$", ".sort_values(ascending=False)"),
    (r"\.sort_values\(ascending=False\)$", ".sort_values(ascending=False).head(3)"),
    (r"\.sum\(\)$", ".sum().sort_values()"),
    (r"\.mean\(\)$", ".median()"),
    (r"\.nunique\(\)$", ".unique()"),
    (r"\.tail\(\)$", ".tail(8)"),
)


@dataclass(frozen=True)
class Persona:
    """One developer's habits; rates are per cell."""

    user: str
    expert: bool
    slips: float  # a new cell first runs with a misspelt variable, method or column
    wrong: float  # the developer makes the plan's own mistake for a cell, when it has one
    tweak: float  # edits a cell to show its result differently and runs it again
    recheck: float  # runs the cell just run once more, unchanged
    revisit: float  # goes back up and runs an earlier cell again
    split: float  # computes in one cell and shows the result in the next
    prints: float  # prints the final expression instead of letting Jupyter display it
    scratch: float  # adds a throwaway check cell (deleted afterwards, half the time)
    checks: float  # looks at what a cell made (a shape, a length, a value) in a cell of its own
    patience: float  # waits for a long cell instead of interrupting it
    restarts: int  # kernel restarts in a session
    after_restart: tuple[float, float, float]  # chances of Run All, re-running the top cells, carrying on
    head_rows: int  # n in the developer's df.head(n)
    digits: int  # digits in the developer's .round(n)
    forgets_imports: bool  # leaves an import out of the first cell and adds it when a NameError says so
    markdown: bool  # writes markdown headings
    save_every: int  # saves after this many new cells
    semicolon_plots: bool  # ends plotting cells with ';' rather than plt.show()


@dataclass
class Tracked:
    """A notebook cell and what the developer knows about it."""

    cell: Cell
    once: bool = False  # fails or misleads when run again: never revisited
    mutates: bool = False  # changes an object in place: a revisit re-applies the change
    defines: set[str] = field(default_factory=set)


class Developer:
    """Plays a scenario's plan in a notebook with a persona's habits."""

    def __init__(
        self, nb: Notebook, persona: Persona, session: str, aliases: dict[str, Sequence[str]], slot: int
    ) -> None:
        self.nb = nb
        self.persona = persona
        self.rng = random.Random(f"{session}/habits")
        # The persona's variable names: slot picks one spelling per canonical name, so the
        # developers of one scenario name things differently.
        self.names = {canonical: options[slot % len(options)] for canonical, options in aliases.items()}
        self.tracked: list[Tracked] = []
        self.import_cell: Tracked | None = None
        self.missing_imports: dict[str, str] = {}  # alias -> the import line left out of the first cell
        self.new_cells = 0
        self.planned = 0  # planned cells played so far
        self.restart_at: set[int] = set()  # planned-cell counts at which the kernel is restarted
        self.ran: set[int] = set()  # ids of the tracked cells run since the kernel (re)started

    # -- the plan's vocabulary ------------------------------------------------

    def plan_length(self, cells: int) -> None:
        """Tell the developer how many cells the plan has, so restarts spread over the session."""
        if cells < 8:
            raise ValueError("a plan needs at least 8 cells")
        spots = range(4, cells - 1)
        self.restart_at = set(self.rng.sample(list(spots), min(self.persona.restarts, len(spots))))

    def pick(self, *options: str) -> str:
        """One of ``options``, chosen for this session."""
        return self.rng.choice(options)

    def chance(self, p: float) -> bool:
        """True with probability ``p``, drawn from the session's generator."""
        return self.rng.random() < p

    def section(self, title: str) -> None:
        """A markdown heading, if the persona writes them."""
        if self.persona.markdown:
            self.nb.run(self.nb.add(title, cell_type="markdown"))

    def imports(self, *lines: str, then: str = "") -> Tracked:
        """The first cell: import lines (one may be forgotten) and code that follows them."""
        kept = list(lines)
        # an import the first cell's own code needs would be missed at once, not later
        optional = [
            line
            for line in lines[1:]
            if re.fullmatch(r"import \w+(\.\w+)* as \w+", line) and line.rsplit(" ", 1)[1] not in then
        ]
        if self.persona.forgets_imports and optional:
            forgotten = self.rng.choice(optional)
            kept.remove(forgotten)
            self.missing_imports[forgotten.rsplit(" ", 1)[1]] = forgotten
        code = "\n".join(kept) + (f"\n\n{self.style(self.rename(then))}" if then else "")
        self.import_cell = self._add_and_run(code, mistakes=[], once=False, mutates=False)
        return self.import_cell

    def cell(
        self,
        code: str,
        *,
        show: str | None = None,
        wrong: Sequence[Edit] = (),
        broken: Sequence[Edit] = (),
        tweaks: Sequence[Edit] = (),
        long: Edit | None = None,
        once: bool = False,
        mutates: bool = False,
        optional: float = 0.0,
        peek: Sequence[str] = (),
        check: Sequence[str] = (),
        plot: bool = False,
    ) -> Tracked | None:
        """One planned cell, played with the persona's habits.

        ``show`` is an expression that displays the result (in the same cell, or
        in the next one when the persona splits); ``wrong`` lists mistakes the
        developer may make first and ``broken`` mistakes always made, fixed one
        run at a time; ``tweaks`` are edits to look at the result differently;
        ``long`` marks a slow cell and the edit that makes it quick; ``once``
        cells fail when run again; ``mutates`` cells change data in place;
        ``optional`` is the chance the developer skips the cell; ``peek`` are
        quick checks the developer may type in a throwaway cell afterwards;
        ``check`` are quick looks at what the cell made (``df.shape``,
        ``len(rows)``, a scalar's name) typed in a cell of its own, which only
        the kernel's state answers;
        ``plot`` cells end with ``plt.show()`` or ``;``.
        """
        if optional and self.chance(optional):
            return None
        self._maybe_restart()
        code = self.rename(code)
        if plot:
            code = code + ";" if self.persona.semicolon_plots else code + "\nplt.show()"
        shown_apart = show is not None and self.chance(self.persona.split)
        if show is not None and not shown_apart:
            code = f"{code}\n{self.rename(show)}"
        code = self.conventions(code) if plot else self.style(code)
        mistakes = [self.adapt(edit) for edit in broken]
        if wrong and self.chance(self.persona.wrong):
            mistakes.append(self.adapt(self.rng.choice(list(wrong))))
        elif not broken and self.chance(self.persona.slips):
            slip = self.slip(code)
            if slip is not None:
                mistakes.append(slip)
        if long is not None:
            mistakes = []  # a slow cell is typed with care; the developer's trouble is its run time
        tracked = self._add_and_run(code, mistakes, once, mutates, self._long(long))
        if shown_apart and show is not None:
            self._add_and_run(self.style(self.rename(show)), [], False, False)
        self._follow_up(tracked, tweaks, peek, check)
        return tracked

    # -- style ----------------------------------------------------------------

    def rename(self, code: str) -> str:
        """The plan's canonical variable names replaced by the persona's."""
        if not self.names:
            return code
        out: list[tokenize.TokenInfo] = []
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
        except (tokenize.TokenError, SyntaxError):
            # a fragment of a line (an edit's text): rename whole words outside attribute access
            return re.sub(r"(?<![.\w])([A-Za-z_]\w*)\b(?!\s*=[^=])", lambda m: self.names.get(m[1], m[1]), code)
        depth = 0
        for index, token in enumerate(tokens):
            following = tokens[index + 1].string if index + 1 < len(tokens) else ""
            previous = tokens[index - 1].string if index else ""
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
            if (
                token.type == tokenize.NAME
                and token.string in self.names
                and previous != "."
                and not (depth and following == "=")
            ):
                token = token._replace(string=self.names[token.string])
            elif token.type == tokenize.STRING and re.match(r"[rRbB]?[fF]", token.string):
                token = token._replace(string=self._rename_fstring(token.string))
            out.append(token)
        return tokenize.untokenize(out)

    def _rename_fstring(self, text: str) -> str:
        """Rename whole-word names inside the ``{...}`` fields of an f-string."""

        def field_(match: re.Match[str]) -> str:
            return re.sub(r"(?<![.\w])(\w+)\b", lambda m: self.names.get(m[1], m[1]), match[0])

        return re.sub(r"\{[^{}]*\}", field_, text)

    def conventions(self, code: str) -> str:
        """The persona's fixed choices: rows in ``.head()``, digits in ``.round(2)``."""
        code = code.replace(".head()", f".head({self.persona.head_rows})")
        return code.replace(".round(2)", f".round({self.persona.digits})")

    def adapt(self, edit: Edit) -> Edit:
        """A plan's edit in the persona's names and conventions."""
        old, new = (self.conventions(self.rename(part)) for part in edit)
        return old, new

    def style(self, code: str) -> str:
        """Apply the persona's display habits: conventions, and printing the last expression."""
        code = self.conventions(code)
        last = final_expression(code)
        if last is not None and self.chance(self.persona.prints) and not re.match(r"(print|display|plt\.|_ =)", last):
            head, _, _ = code.rpartition(last)
            code = f"{head}print({last})"
        return code

    # -- mistakes -------------------------------------------------------------

    def slip(self, code: str) -> Edit | None:
        """A plausible misspelling in ``code`` that makes it fail: a known variable, a method or a column."""
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return None
        known = set().union(*(t.defines for t in self.tracked)) if self.tracked else set()
        lines = code.splitlines(keepends=True)
        candidates: list[tuple[int, int, int, str]] = []  # line, start, end (bytes), original text
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in known and len(node.id) > 1:
                candidates.append((node.lineno, node.col_offset, node.end_col_offset or 0, node.id))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and len(node.attr) > 3:
                end = node.end_col_offset or 0
                candidates.append((node.end_lineno or node.lineno, end - len(node.attr.encode()), end, node.attr))
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
                and len(node.slice.value) > 3
            ):
                constant = node.slice
                candidates.append(
                    (
                        constant.lineno,
                        constant.col_offset + 1,
                        (constant.end_col_offset or 0) - 1,
                        cast(str, constant.value),
                    )
                )
        if not candidates:
            return None
        line, start, end, original = self.rng.choice(sorted(candidates))
        misspelt = self.misspell(original)
        raw = lines[line - 1].encode()
        lines[line - 1] = (raw[:start] + misspelt.encode() + raw[end:]).decode()
        return code, "".join(lines)

    def misspell(self, word: str) -> str:
        """A typing slip on ``word`` that is not ``word``."""
        if word in COMMON_SLIPS and self.chance(0.6):
            return COMMON_SLIPS[word]
        kind = self.rng.randrange(4)
        if kind == 0 and word[0].isalpha():
            return word[0].swapcase() + word[1:]
        if kind == 1:
            position = self.rng.randrange(1, len(word))
            return word[:position] + word[position + 1 :]
        if kind == 2 and len(word) > 3:
            position = self.rng.randrange(1, len(word) - 2)
            swapped = word[:position] + word[position + 1] + word[position] + word[position + 2 :]
            if swapped != word:
                return swapped
        return word + "s" if not word.endswith("s") else word[:-1]

    # -- running --------------------------------------------------------------

    def _long(self, long: Edit | None) -> Edit | None:
        """The quick version's edit when the developer interrupts a long cell; None when they wait."""
        if long is None or self.chance(self.persona.patience):
            return None
        return self.adapt(long)

    def _add_and_run(
        self, code: str, mistakes: list[Edit], once: bool, mutates: bool, interrupt: Edit | None = None
    ) -> Tracked:
        """Add a cell typed with ``mistakes``, run it, fix them one run at a time, then run it as planned."""
        typed = code
        made: list[tuple[int, str, str]] = []  # where each mistake sits in the typed text, to undo it there
        for good, bad in mistakes:
            at = typed.find(good)
            if at < 0:
                raise ValueError(f"{self.nb.log.session}: {good!r} is not in the cell:\n{typed}")
            typed = typed[:at] + bad + typed[at + len(good) :]
            made.append((at, good, bad))
        tracked = Tracked(self.nb.add(typed), once=once, mutates=mutates)
        self.tracked.append(tracked)
        self.new_cells += 1
        if interrupt is not None:
            # the developer stops a slow cell and makes it quick; the cell keeps the quick version
            self.nb.run(tracked.cell, interrupt_after_s=round(self.rng.uniform(0.8, 1.6), 2))
            self.nb.fix(tracked.cell, *interrupt)
        for at, good, bad in reversed(made):
            self.execute(tracked, expect_failure=True)
            source = tracked.cell.source
            self.nb.edit(tracked.cell, source[:at] + good + source[at + len(bad) :])
        self.execute(tracked)
        if self.new_cells % self.persona.save_every == 0:
            self.nb.save()
        return tracked

    def execute(self, tracked: Tracked, expect_failure: bool = False, depth: int = 0) -> bool:
        """Run a cell and recover as a developer would when it fails unexpectedly.

        A NameError sends the developer to the forgotten import or the cell that
        defines the name; any other unplanned failure makes them run the cells
        above that this kernel has not run and that change what the cell reads,
        or else restart the kernel and run all the cells above, and try again.
        """
        ok = self.nb.run(tracked.cell)
        self.ran.add(id(tracked))
        if ok:
            tracked.defines = defined_names(tracked.cell.source)
            return True
        if expect_failure:
            return False
        error = self.nb.last_error or {}
        missing = NAME_ERROR.search(error.get("evalue", "")) if error.get("ename") == "NameError" else None
        if depth < 8 and missing and self._provide(missing[1], tracked, depth):
            return self.execute(tracked, depth=depth + 1)
        skipped = self._stale_inputs(tracked)
        if depth < 7 and skipped:
            # stale state after a restart: the cells above, not run since, that change what this cell reads
            self.run_all(skipped)
            return self.execute(tracked, depth=7)
        if depth < 8:
            # Jupyter's "Restart Kernel and Run up to Selected Cell"
            self.nb.restart()
            self.ran.clear()
            self.run_all(self._above(tracked))
            return self.execute(tracked, depth=8)
        raise RuntimeError(f"{self.nb.log.session}: an unplanned failure ({error}) in:\n{tracked.cell.source}")

    def _stale_inputs(self, tracked: Tracked) -> list[Tracked]:
        """The cells above, not run since the restart, that change what ``tracked`` reads, directly or through
        one another (walking up from the cell, in notebook order)."""
        needed = loaded_names(tracked.cell.source)
        chosen: list[Tracked] = []
        for above in reversed(self._above(tracked)):
            if changed_names(above.cell.source) & needed:
                needed |= loaded_names(above.cell.source)
                if id(above) not in self.ran:
                    chosen.append(above)
        return chosen[::-1]

    def _provide(self, name: str, failing: Tracked, depth: int) -> bool:
        """Define ``name`` again: add a forgotten import to the first cell, or run the first cell that defines it."""
        if name in self.missing_imports and self.import_cell is not None:
            line = self.missing_imports.pop(name)
            imports, sep, rest = self.import_cell.cell.source.partition("\n\n")
            self.nb.edit(self.import_cell.cell, f"{imports}\n{line}{sep}{rest}")
            return self.execute(self.import_cell, depth=depth + 1)
        definers = [t for t in self._above(failing) if name in defined_names(t.cell.source)]
        if not definers:
            return False
        # prefer a cell that creates the name over one that only updates it (df = df[...])
        creating = [t for t in definers if name not in loaded_names(t.cell.source)]
        return self.execute((creating or definers)[0], depth=depth + 1)

    def _above(self, tracked: Tracked) -> list[Tracked]:
        """The live code cells above ``tracked`` in notebook order."""
        live = self._live()
        cells = [t for t in live if t.cell.cell_type == "code"]
        return cells[: cells.index(tracked)] if tracked in cells else cells

    def _follow_up(self, tracked: Tracked, tweaks: Sequence[Edit], peek: Sequence[str], check: Sequence[str]) -> None:
        """What the developer does after a planned cell: tweak it, re-run it, revisit an earlier cell, peek, check."""
        if self.chance(self.persona.tweak):
            edit = self._tweak(tracked.cell.source, tweaks)
            if edit is not None:
                self.nb.fix(tracked.cell, *edit)
                if not self.execute(tracked, expect_failure=True):
                    self.nb.fix(tracked.cell, edit[1], edit[0])
                    self.execute(tracked)
        if self.chance(self.persona.recheck) and not tracked.once:
            self.execute(tracked)
        if self.chance(self.persona.revisit):
            self._revisit(tracked)
        if peek and self.chance(self.persona.scratch):
            scratch = self._add_and_run(self._quick_look(peek), [], True, False)
            if self.chance(0.5):
                self.nb.delete(scratch.cell)
                self.tracked.remove(scratch)
        if check and self.chance(self.persona.checks):
            self._add_and_run(self._quick_look(check), [], False, False)

    def _quick_look(self, choices: Sequence[str]) -> str:
        """One of a cell's planned quick looks (a peek or a check), in the persona's names and style."""
        return self.style(self.rename(self.rng.choice(list(choices))))

    def _tweak(self, source: str, tweaks: Sequence[Edit]) -> Edit | None:
        """A planned tweak, else a generic one that fits the cell's last line; None when none fits."""
        usable = [edit for edit in map(self.adapt, tweaks) if edit[0] in source]
        if usable:
            return self.rng.choice(usable)
        last_line = source.rstrip().splitlines()[-1]
        for pattern, replacement in GENERIC_TWEAKS:
            if re.search(pattern, last_line):
                return last_line, re.sub(pattern, replacement, last_line)
        return None

    def _revisit(self, current: Tracked) -> None:
        """Run an earlier cell again: an in-place change is re-applied more often than not."""
        earlier = [
            t
            for t in self.tracked
            if t is not current and not t.once and t in self._live() and t is not self.import_cell
        ]
        if not earlier:
            return
        mutating = [t for t in earlier if t.mutates]
        chosen = self.rng.choice(mutating if mutating and self.chance(0.5) else earlier)
        self.execute(chosen, expect_failure=True)

    def _live(self) -> list[Tracked]:
        """Tracked cells still in the notebook."""
        cells = self.nb.cells
        return [t for t in self.tracked if t.cell in cells]

    def _maybe_restart(self) -> None:
        """Restart the kernel where the plan length put a restart, then recover the persona's way."""
        self.planned += 1
        if self.planned not in self.restart_at:
            return
        if self.chance(0.6):
            self.nb.save()
        self.nb.restart()
        self.ran.clear()
        mode = self.rng.choices(AFTER_RESTART, weights=self.persona.after_restart)[0]
        live = [t for t in self._live() if t.cell.cell_type == "code"]
        if mode == "all":
            self.run_all(live)
        elif mode == "top":
            for tracked in live[: self.rng.randint(1, min(4, len(live)))]:
                self.execute(tracked)

    def run_all(self, cells: list[Tracked]) -> None:
        """Run the cells in order, as Run All does; a cell that fails is skipped and the ones below it still run.

        Cells marked ``once`` that already ran in this kernel are left out, as
        running them again would fail.
        """
        for tracked in cells:
            if tracked.once and id(tracked) in self.ran:
                continue
            if self.nb.run(tracked.cell):
                tracked.defines = defined_names(tracked.cell.source)
            self.ran.add(id(tracked))

    def finish(self) -> None:
        """End of the session: maybe a last Run All, then save."""
        if self.chance(0.05):
            self.nb.restart()
            self.ran.clear()
            self.run_all([t for t in self._live() if t.cell.cell_type == "code"])
        self.nb.save()


def final_expression(code: str) -> str | None:
    """The source of the cell's last statement when it is a bare expression on the last line(s)."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return None
    if not body or not isinstance(body[-1], ast.Expr) or code.rstrip().endswith(";"):
        return None
    segment = ast.get_source_segment(code, body[-1])
    if segment is None or not code.rstrip().endswith(segment):
        return None
    return segment


def _top_level_nodes(tree: ast.Module) -> list[ast.AST]:
    """The module's nodes outside function bodies, lambdas and comprehensions (their names are local)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def defined_names(code: str) -> set[str]:
    """Names a cell binds at top level: assignments, loop targets, imports, functions and classes."""
    tree = _parse(code)
    if tree is None:
        return set()
    names: set[str] = set()
    for node in _top_level_nodes(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return {name for name in names if not keyword.iskeyword(name)}


def loaded_names(code: str) -> set[str]:
    """Names a cell reads at top level."""
    tree = _parse(code)
    if tree is None:
        return set()
    return {node.id for node in _top_level_nodes(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def changed_names(code: str) -> set[str]:
    """Names whose objects a cell binds or changes at top level: ``x = ...``, ``x[k] = ...``, ``x.a = ...``,
    ``x.m(..., inplace=True)`` and ``x.append/update/setdefault(...)``."""
    tree = _parse(code)
    if tree is None:
        return set()
    names = defined_names(code)
    for node in _top_level_nodes(tree):
        if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            base = node.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            in_place = any(k.arg == "inplace" for k in node.keywords) or node.func.attr in IN_PLACE_METHODS
            if in_place:
                names.add(node.func.value.id)
    return names
