"""Options: library errors name keywords, the CLI names flags; one name per meaning across subcommands."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from dataset_fixture import write_dataset
from repository import REPOSITORY
from synthetic import synthetic_steps, write_steps

from themisto.building.parquet import build_dataset
from themisto.building.prompts import PROMPT_REPR_TRUNCATION_MARK, RenderOptions
from themisto.building.selection import SelectionOptions, select
from themisto.cli import build_parser, main
from themisto.cli.options import error_line
from themisto.declaration import declarations, declared_values, flag_of, parse_size
from themisto.evaluation.data import data_location
from themisto.exceptions import InputError, OptionError, ReplayDivergedError, ThemistoError, keyword_spelling
from themisto.kernel import ENVIRONMENT, TRUST
from themisto.recording.options import RECORDED, RUN_CONTROL, RecordOptions
from themisto.recording.record import record_source
from themisto.recording.stability import check_stability

# The flags of the commands that start kernels: a contract with every script that calls them.
COMMAND_FLAGS = {
    "record": "-h --help -o --output --timeout --workdir --kernel --max-memory --max-cpu-seconds --isolate-home"
    " --no-sandbox --allow-network --pass-env --resume --overwrite --resume-diverged --max-repr-chars --repr-timeout"
    " --max-output-chars --max-raw-output-chars --max-variables --skip-pattern --order --jobs --shard -q --quiet",
    "stability": "-h --help --runs -o --output --timeout --workdir --kernel --max-memory --max-cpu-seconds"
    " --isolate-home --no-sandbox --allow-network --pass-env --max-output-chars -q --quiet",
    "exec-score": "-h --help --data --trajectories -o --output --timeout --workdir --kernel --max-memory"
    " --max-cpu-seconds --isolate-home --no-sandbox --allow-network --pass-env --jobs --shard -q --quiet",
}
# The record options each of those commands sets.
COMMAND_OPTIONS = {
    "record": (*RECORDED, *TRUST, *RUN_CONTROL),
    "stability": (*ENVIRONMENT, "max_output_chars"),
    "exec-score": ENVIRONMENT,
}
# a Themisto flag (--max-output-chars); lm-eval's own, which advice may name, are underscored (--log_samples)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*(?!\w)")


def _notebook(path: Path, cells: list[str]) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code) for code in cells]
    nbformat.write(notebook, path)
    return path


def unannotated(folder: Path) -> Path:
    """A trajectory no stability run has annotated."""
    steps = synthetic_steps("t", 5)
    for step in steps:
        step.stable = None
    return write_steps(folder / "t.jsonl", steps)


def _raised_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal inside a ``raise`` statement (f-string parts included), with its line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            for inner in ast.walk(node.exc):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                    found.append((inner.lineno, inner.value))
    return found


def test_no_library_error_names_a_command_line_flag() -> None:
    offenders = []
    for path in sorted((REPOSITORY / "themisto").rglob("*.py")):
        if "cli" in path.relative_to(REPOSITORY / "themisto").parts or path.name == "launcher.py":
            continue  # the CLI speaks in flags; the launcher is a command line of its own
        for line, text in _raised_strings(ast.parse(path.read_text(encoding="utf-8"))):
            if FLAG.search(text):
                offenders.append(f"{path.relative_to(REPOSITORY)}:{line}: {text!r}")
    assert not offenders


def test_an_option_error_spells_options_per_caller_and_keeps_facts_verbatim() -> None:
    error = OptionError("{path} exists; continue it with {resume:True} or check {max_output_chars}", path="a{b}.jsonl")
    assert str(error) == "a{b}.jsonl exists; continue it with resume=True or check max_output_chars"
    assert error.render(lambda name, value: f"<{name}|{value}>") == (
        "a{b}.jsonl exists; continue it with <resume|True> or check <max_output_chars|None>"
    )
    summary = error.prefixed("2 of {3} failed: ")
    assert str(summary) == "2 of {3} failed: " + str(error) and isinstance(summary, InputError)
    assert keyword_spelling("runs", None) == "runs"


def test_a_replay_that_diverged_is_no_option_error_but_names_options_per_caller() -> None:
    error = ReplayDivergedError("{path}: step 3 does not reproduce; re-record it with {overwrite:True}", path="t.jsonl")
    assert not isinstance(error, OptionError) and isinstance(error, ThemistoError)
    assert str(error) == "t.jsonl: step 3 does not reproduce; re-record it with overwrite=True"
    summary = error.prefixed("2 of 2 trajectories failed; the first: ")
    assert type(summary) is ReplayDivergedError  # the summary of several failures still says what happened
    assert error_line(summary, {"overwrite": "--overwrite"}).endswith("re-record it with --overwrite")


def test_python_callers_read_keyword_names(tmp_path: Path) -> None:
    with pytest.raises(OptionError) as info:
        check_stability([tmp_path], runs=0)
    assert str(info.value) == "runs must be at least 1, got 0"
    least = len(PROMPT_REPR_TRUNCATION_MARK)
    with pytest.raises(OptionError, match=rf"^prompt_repr_chars must be at least {least}, got {least - 1}$"):
        RenderOptions(prompt_repr_chars=least - 1)
    with pytest.raises(OptionError, match=r"^quantile must be in \(0, 1\], got 2$"):
        SelectionOptions(quantile=2)
    with pytest.raises(OptionError, match=r"^sample must be one of paper, all, got 'x'$"):
        SelectionOptions(sample="x")
    with pytest.raises(OptionError, match=r"^samples must be one of separate, shared, got 'both'$"):
        SelectionOptions(samples="both")
    with pytest.raises(OptionError, match=r"^max_context_chars must be at least 0, got -1$"):
        SelectionOptions(max_context_chars=-1)
    with pytest.raises(OptionError, match=r"^stable_only=True needs stability annotations"):
        select([unannotated(tmp_path)], SelectionOptions(stable_only=True))
    errors = write_steps(tmp_path / "e.jsonl", synthetic_steps("e", 20, error_rate=1.0))
    with pytest.raises(OptionError, match=r"see include_errors, include_empty, min_history, quantile and stable_only$"):
        build_dataset([errors], tmp_path / "out")
    with pytest.raises(OptionError, match=r"or give data\)$"):
        data_location(str(tmp_path / "absent"))
    source = _notebook(tmp_path / "nb.ipynb", ["1"])
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "nb.jsonl").write_text("precious\n")
    with pytest.raises(OptionError, match=r"continue it with resume=True or replace it with overwrite=True$"):
        record_source(source, tmp_path / "out", RecordOptions())
    with pytest.raises(OptionError, match="^jobs must be at least 1, got 0$"):
        record_source(source, tmp_path / "out", jobs=0)


def test_the_cli_names_the_flags_that_set_those_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    errors = write_steps(tmp_path / "e.jsonl", synthetic_steps("e", 20, error_rate=1.0))
    cases = [
        (
            ["build", str(errors), "-o", str(tmp_path / "b")],
            "see --include-errors, --include-empty, --min-history, --quantile and --stable-only",
        ),
        (["build", str(errors), "-o", str(tmp_path / "b"), "--prompt-repr-chars", "3"], "--prompt-repr-chars must"),
        (["build", str(unannotated(tmp_path)), "-o", str(tmp_path / "b"), "--stable-only"], "--stable-only needs"),
        (["build", str(errors), "-o", str(tmp_path / "b"), "--quantile", "2"], "--quantile must be in (0, 1], got 2"),
        (["build", str(errors), "-o", str(tmp_path / "b"), "--min-history", "-1"], "--min-history must be at least 0"),
        (
            ["build", str(errors), "-o", str(tmp_path / "b"), "--max-runtime-chars", "10"],
            "--max-runtime-chars must be at least 200, got 10",
        ),
        (
            ["eval", "--model", "themisto-empty", "-o", str(tmp_path / "r"), "--data", str(tmp_path / "x")],
            "give --data)",
        ),
        (["stability", str(errors), "--runs", "0"], "--runs must be at least 1, got 0"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and message in error, (argv, error)
    assert not (tmp_path / "b").exists()


def test_several_failures_keep_the_flags_of_the_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sources = tmp_path / "nbs"
    sources.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a", "b"):
        _notebook(sources / f"{name}.ipynb", ["1"])
        (out / f"{name}.jsonl").write_text("precious\n")
    assert main(["record", str(sources), "-o", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all("--resume" in line and "--overwrite" in line for line in lines)
    assert lines[-1].startswith("themisto record: error: 2 of 2 trajectories failed; the first: ")
    with pytest.raises(OptionError, match="2 of 2 trajectories failed; the first: .* resume=True"):
        record_source(sources, out)


def test_record_and_build_repr_caps_have_one_name_each(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    record = parser.parse_args(["record", "x.ipynb", "-o", "out"])
    build = parser.parse_args(["build", "t.jsonl"])
    assert not hasattr(record, "prompt_repr_chars") and not hasattr(build, "max_repr_chars")
    assert build.prompt_repr_chars is None  # unset: RenderOptions' own default, which is not record's cap
    assert RenderOptions().prompt_repr_chars != RecordOptions().max_repr_chars
    with pytest.raises(SystemExit):  # no hidden alias: record's cap is not a spelling of the prompt's
        parser.parse_args(["build", "t.jsonl", "--max-repr-chars", "50"])
    assert "unrecognized arguments: --max-repr-chars 50" in capsys.readouterr().err
    helps = {}
    for command in ("record", "build"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        helps[command] = capsys.readouterr().out
    listed = re.compile(r"^\s+--max-repr-chars\b", re.MULTILINE)  # an option of the listing, not a mention
    assert "--prompt-repr-chars" in helps["build"] and not listed.search(helps["build"])
    assert listed.search(helps["record"]) and "--prompt-repr-chars" not in helps["record"]


# Every option flag of `themisto build`, a contract with users' scripts: the argument it takes here (None: a
# switch), the option it sets and the value that gives.
BUILD_FLAGS: dict[str, tuple[str | None, str, object]] = {
    "--sample": ("all", "sample", "all"),
    "--seed": ("3", "seed", 3),
    "--include-errors": (None, "include_errors", True),
    "--include-images": (None, "include_images", True),
    "--include-empty": (None, "include_empty", True),
    "--min-history": ("2", "min_history", 2),
    "--samples": ("shared", "samples", "shared"),
    "--keep-figure-text": (None, "figure_text_as_image", False),
    "--include-timing": (None, "include_timing", True),
    "--keep-machine-text": (None, "mask_machine_text", False),
    "--include-invented-errors": (None, "include_invented_errors", True),
    "--original-history": (None, "original_history", True),
    "--stable-only": (None, "stable_only", True),
    "--quantile": ("0.5", "quantile", 0.5),
    "--max-context-chars": ("0", "max_context_chars", 0),
    "--runtime-format": ("json", "runtime_format", "json"),
    "--max-runtime-chars": ("500", "max_runtime_chars", 500),
    "--prompt-repr-chars": ("40", "prompt_repr_chars", 40),
    "--no-descriptions": (None, "descriptions", False),
}


def test_build_flags_keep_their_names_and_set_their_options() -> None:
    argv = ["build", "t.jsonl"]
    for flag, (value, _, _) in BUILD_FLAGS.items():
        argv += [flag] if value is None else [flag, value]
    args = build_parser().parse_args(argv)
    assert set(args.option_flags.values()) == {*BUILD_FLAGS, "--help", "--output", "--license", "--jobs", "--quiet"}
    selection = SelectionOptions(**declared_values(args, SelectionOptions))
    render = RenderOptions(**declared_values(args, RenderOptions))
    for flag, (_, name, expected) in BUILD_FLAGS.items():
        assert getattr(selection if hasattr(selection, name) else render, name) == expected, flag
    unset = build_parser().parse_args(["build", "t.jsonl"])  # nothing given: the options' own defaults
    assert SelectionOptions(**declared_values(unset, SelectionOptions)) == SelectionOptions()
    assert RenderOptions(**declared_values(unset, RenderOptions)) == RenderOptions()


def test_the_card_and_the_protocol_name_build_options_by_their_flags() -> None:
    flags = set(BUILD_FLAGS)
    card = set(FLAG.findall((REPOSITORY / "themisto" / "building" / "card.py").read_text(encoding="utf-8")))
    assert card - {"--runs"} <= flags  # --runs: the card's advice to run `themisto stability`
    protocol = (REPOSITORY / "docs" / "protocol.md").read_text(encoding="utf-8")
    synopsis = protocol.split("## Build the dataset", 1)[1].split("```")[1]  # its usage block
    assert set(FLAG.findall(synopsis)) == flags | {"--license", "--jobs"}  # neither changes what a build holds


def test_sizes_have_one_reading_each() -> None:
    binary = {"512M": 512 * 2**20, "2g": 2 * 2**30, "2GiB": 2 * 2**30, "1.5GiB": 3 * 2**29, "1K": 1024}
    decimal = {"500MB": 500 * 10**6, "2GB": 2 * 10**9, "1kB": 1000, "1000000": 10**6, "64B": 64}
    for text, size in {**binary, **decimal}.items():
        assert parse_size(text) == size, text


def test_eval_and_record_refuse_bad_input_in_one_line_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_dataset(tmp_path / "data")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    notebook = _notebook(tmp_path / "nb.ipynb", ["1"])
    eval_args = ["eval", "--data", str(data), "-o", str(tmp_path / "run")]
    cases = [
        # a misspelt baseline: the closest name, then the baselines before lm-eval's 40 models
        ([*eval_args, "--model", "themisto-heuristc"], "did you mean themisto-heuristic? Themisto baselines: "),
        (["eval", "--data", str(data), "--model", "themisto-empty", "-o", str(a_file)], "is a file, not a folder"),
        (["eval", "--data", str(data), "--model", "themisto-empty", "-o", str(a_file / "run")], "cannot create"),
        ([*eval_args, "--model", "themisto-empty", "--gen-kwargs", "max_gen_toks"], "--gen-kwargs 'max_gen_toks'"),
        # eval's flags come from its declaration (EvalOptions): its checks, in the flag's spelling
        ([*eval_args, "--model", "themisto-empty", "--limit", "0"], "--limit must be positive, got 0"),
        ([*eval_args, "--model", "themisto-empty", "--limit", "some"], "--limit must be a number, got 'some'"),
        *(
            [
                (
                    [*eval_args, "--model", "vllm"],
                    "model 'vllm' needs vllm, which is not installed (pip install themisto[vllm])",
                )
            ]
            if importlib.util.find_spec("vllm") is None
            else []
        ),
        (["record", str(notebook), "-o", str(tmp_path / "rec"), "--max-memory", "2gb"], "have two readings"),
        (["record", str(notebook), "-o", str(tmp_path / "rec"), "--max-memory", "1KB"], "have two readings"),
    ]
    errors = []
    for argv, message in cases:
        assert main(argv) == 2, argv
        errors.append(capsys.readouterr().err)
        # one line and no status line before it: nothing was loaded or run
        assert errors[-1].count("\n") == 1 and message in errors[-1], (argv, errors[-1])
    assert errors[0].index("themisto-repeat-last") < errors[0].index("lm-eval models: ") < errors[0].index(" hf,")
    assert not (tmp_path / "run").exists() and not (tmp_path / "rec").exists()


def test_a_switch_turned_off_is_spelled_as_its_no_flag_on_the_command_line() -> None:
    error = OptionError("run with {sandbox:False} or {timeout:5}", needed=6)
    assert str(error) == "run with sandbox=False or timeout=5"
    flags = {"sandbox": "--no-sandbox", "timeout": "--timeout"}
    assert error_line(error, flags) == "run with --no-sandbox or --timeout 5"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, as ``themisto`` builds it."""
    [subparsers] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_every_record_option_is_declared_and_a_flag_of_each_command_that_sets_it() -> None:
    assert [f.name for f, _ in declarations(RecordOptions)] == [f.name for f in dataclasses.fields(RecordOptions)]
    parsers = _subcommands()
    for command, names in COMMAND_OPTIONS.items():
        actions = {action.dest: action for action in parsers[command]._actions}
        flags = {flag for action in parsers[command]._actions for flag in action.option_strings}
        assert flags == set(COMMAND_FLAGS[command].split()), command
        for field, declared in declarations(RecordOptions):
            if field.name not in names:
                assert field.name not in actions, (command, field.name)
                continue
            action = actions[field.name]
            assert action.option_strings == [flag_of(field, declared)] and action.default is None, field.name
            assert action.help is not None
            text = " ".join(action.help.split())
            if declared.default_text == "":
                assert "(default" in text, (command, field.name, text)  # the command says what unset means to it
            elif declared.default_text is not None:
                assert f"(default {declared.default_text})" in text, (command, field.name, text)
            elif not isinstance(field.default, bool) and field.default != ():  # a switch or a list shows none
                shown = f"{field.default:g}" if isinstance(field.default, float) else str(field.default)
                assert f"(default {shown})" in text, (command, field.name, text)


@pytest.mark.parametrize(
    ("keyword", "value", "flag"),
    [
        ("timeout", 0, "--timeout"),
        ("repr_timeout", -1.0, "--repr-timeout"),
        ("max_repr_chars", 0, "--max-repr-chars"),
        ("max_output_chars", 0, "--max-output-chars"),
        ("max_raw_output_chars", 0, "--max-raw-output-chars"),
        ("max_memory", 0, "--max-memory"),
        ("max_cpu_seconds", 0, "--max-cpu-seconds"),
        ("max_variables", 0, "--max-variables"),
        ("resume_diverged", "go on", "--resume-diverged"),
        ("skip_pattern", "check_logging(", "--skip-pattern"),
        ("notebook_order", "random", "--order"),
    ],
)
def test_a_bad_record_option_names_its_keyword_in_python_and_its_flag_at_the_command_line(
    keyword: str, value: Any, flag: str
) -> None:
    with pytest.raises(OptionError) as caught:
        RecordOptions(**{keyword: value})
    assert str(caught.value).startswith(f"{keyword} must be ")
    assert error_line(caught.value, _subcommands()["record"].get_default("option_flags")).startswith(f"{flag} must be ")
    with pytest.raises(OptionError):
        dataclasses.replace(RecordOptions(), **{keyword: value})  # a copy with a bad value is refused too


def test_the_documents_name_only_flags_their_commands_have() -> None:
    parsers = _subcommands()
    flags = {name: {flag for a in parser._actions for flag in a.option_strings} for name, parser in parsers.items()}
    # a command line in a document: ``themisto CMD ...`` up to the end of its code span, line or subshell
    call = re.compile(r"\bthemisto (" + "|".join(map(re.escape, flags)) + r")\b([^`\n)]*)")
    wrong, checked = [], 0
    for path in [REPOSITORY / "README.md", REPOSITORY / "SECURITY.md", *sorted((REPOSITORY / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")  # a shell line continued
        # the notes on what changed for users name flags that are gone, on purpose
        text = text.split("## Changed for users")[0]
        for match in call.finditer(text):
            given = FLAG.findall(match[2])
            checked += len(given)
            wrong += [f"{path.name}: {match[0]}" for flag in given if flag not in flags[match[1]]]
    assert not wrong
    assert checked > 50  # the documents' command lines were found and read


def test_eval_options_refuse_in_python_what_the_flags_refuse() -> None:
    from themisto.cli.eval import EvalOptions

    with pytest.raises(OptionError, match="^limit must be positive, got -1$"):
        EvalOptions(model="themisto-empty", limit=-1)
    with pytest.raises(OptionError, match="^split must be one of test, full, got 'all'$"):
        EvalOptions(model="themisto-empty", split="all")
    assert EvalOptions(model="themisto-empty").batch_size == 1
