"""The recorder on real ipykernel kernels: faults as steps, output rendering and caps, memory, hashes, trust."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from themisto.exceptions import KernelError
from themisto.kernel import inject, transport
from themisto.kernel.environment import is_credential, kernel_environment
from themisto.kernel.outputs import cap_text, render_outputs
from themisto.kernel.recorder import Recorder
from themisto.recording.options import RecordOptions

KERNEL_OPTIONS = RecordOptions(timeout=3, repr_timeout=0.3, max_output_chars=200, max_raw_output_chars=1000)


# --- render_outputs ---------------------------------------------------------------------------


def test_render_outputs_follows_the_plain_text_rules() -> None:
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "hello "},
        {"output_type": "stream", "name": "stdout", "text": ["wor", "ld"]},
        {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/html": "<b>"}, "metadata": {}},
        {"output_type": "display_data", "data": {"text/html": "<b>x</b>"}, "metadata": {}},
        {"output_type": "execute_result", "data": {"text/plain": ["1", "2"], "text/html": "x"}, "execution_count": 1},
        # a notebook shows a figure's picture, not its text/plain fallback
        {"output_type": "display_data", "data": {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": "x"}},
        {"output_type": "error", "ename": "KeyError", "evalue": "'k'", "traceback": []},
        {"output_type": "error", "ename": "KeyboardInterrupt", "evalue": "", "traceback": []},
        {"output_type": "unknown"},
        "not an output",
    ]
    assert render_outputs(outputs) == (
        "hello world\n<image/png>\n<text/html>\n12\n<image/png>\nKeyError: 'k'\nKeyboardInterrupt"
    )


def test_cap_text_marks_the_original_length() -> None:
    assert cap_text("abc", 5) == ("abc", False)
    text, truncated = cap_text("abcdefgh", 3)
    assert truncated and text.startswith("abc\n") and "8 characters" in text


# --- credentials --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_SESSION_TOKEN", True),
        ("GITHUBTOKEN", True),
        ("db_password", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("PATH", False),
        ("HOME", False),
        ("PWD", False),
        ("KEYBOARD_LAYOUT", False),
        ("MPLBACKEND", False),
    ],
)
def test_credential_names(name: str, secret: bool) -> None:
    assert is_credential(name) is secret
    assert (name in kernel_environment({name: "v"})) is not secret


@pytest.mark.kernel
def test_kernel_cannot_read_secrets_and_starts_in_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "themisto-leak-1")
    monkeypatch.setenv("OPENAI_API_KEY", "themisto-leak-2")
    monkeypatch.setenv("MY_DB_PASSWORD", "themisto-leak-3")
    monkeypatch.setenv("THEMISTO_VISIBLE", "themisto-visible")
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    # the kernel gets an allowlist, plus the variables passed by name
    with Recorder(
        trajectory_id="env", workdir=workdir, options=replace(KERNEL_OPTIONS, pass_env=("THEMISTO_VISIBLE",))
    ) as recorder:
        step = recorder.run_cell(
            "import os, json\n"
            "print(json.dumps({'env': {k: v for k, v in os.environ.items() if v.startswith('themisto-')},"
            " 'cwd': os.getcwd()}))",
            "c",
        )
    seen = json.loads(step.output)
    assert seen["env"] == {"THEMISTO_VISIBLE": "themisto-visible"}
    assert Path(seen["cwd"]).resolve() == workdir.resolve()


def test_the_snapshot_answer_skips_the_formatters_and_other_expressions_keep_them(kernel: Recorder) -> None:
    # a formatter a cell registers for JsonText would add text/html, were the snapshot's answer formatted
    kernel.run_cell(
        "get_ipython().display_formatter.formatters['text/html'].for_type("
        "type(__import__('sys').modules['_themisto_snapshot'].JsonText('')), lambda value: '<i>formatted</i>')",
        "f",
    )
    kernel.run_cell(
        "class Rich:\n    def _repr_html_(self): return '<b>rich</b>'\n    def __repr__(self): return 'Rich()'", "r"
    )
    text = "__import__('sys').modules['_themisto_snapshot'].JsonText('{\"x\": [1, 2]}')"
    expressions = {"json": text, "number": "40 + 2", "rich": "Rich()", "broken": "1 / 0"}
    answers = kernel.session.execute("", silent=True, timeout=60, user_expressions=expressions).reply["content"]
    answers = answers["user_expressions"]
    assert answers["json"] == {"status": "ok", "data": {"text/plain": '{"x": [1, 2]}'}, "metadata": {}}
    assert answers["number"]["data"] == {"text/plain": "42"}
    assert answers["rich"]["data"] == {"text/plain": "Rich()", "text/html": "<b>rich</b>"}  # formatted as ever
    assert answers["broken"]["status"] == "error" and answers["broken"]["ename"] == "ZeroDivisionError"
    assert kernel.run_cell("x = 1", "x").runtime[-1].name == "x"  # and the snapshot itself still arrives


# --- faults on the shared kernel ----------------------------------------------------------


def test_exception_is_a_step_and_the_next_cell_runs(kernel: Recorder) -> None:
    failed = kernel.run_cell("kept = 5\n{}['missing']", "err")
    assert failed.error == {"ename": "KeyError", "evalue": "'missing'"}
    assert failed.output == "KeyError: 'missing'" and failed.outputs[0]["output_type"] == "error"
    after = kernel.run_cell("kept + 1", "next")
    assert after.error is None and after.output == "6" and not after.restarted


def test_timeout_interrupts_and_keeps_the_kernel(kernel: Recorder) -> None:
    kernel.run_cell("survivor = 'still here'", "setup")
    step = kernel.run_cell("print('started', flush=True)\nimport time\ntime.sleep(60)", "slow")
    assert step.error["ename"] == "TimeoutError" and "3 s" in step.error["evalue"]
    assert step.output.startswith("started\nTimeoutError:")
    assert "KeyboardInterrupt" not in step.output and 3 <= step.execution_time < 10
    after = kernel.run_cell("survivor", "after")
    assert after.output == "'still here'" and not after.restarted


def test_input_fails_instead_of_waiting(kernel: Recorder) -> None:
    step = kernel.run_cell("input('name? ')", "input")
    assert step.error is not None and step.error["ename"] == "StdinNotImplementedError"


def test_long_output_is_capped_with_marker_and_length(kernel: Recorder) -> None:
    step = kernel.run_cell("print('x' * 5000)", "long")
    assert step.output_truncated and step.output_length == 5000
    assert step.output.startswith("x" * 200 + "\n") and "5000 characters" in step.output
    assert len(step.outputs[0]["text"]) == KERNEL_OPTIONS.max_raw_output_chars


def test_rich_data_over_the_raw_budget_is_dropped_and_named(kernel: Recorder) -> None:
    step = kernel.run_cell(
        "from IPython.display import display\ndisplay({'image/png': 'A' * 5000, 'text/plain': 'pic'}, raw=True)", "img"
    )
    assert step.output == "<image/png>"  # the picture was shown, though its bytes were not kept
    assert step.outputs[0]["data"] == {"text/plain": "pic"}
    assert step.outputs[0]["metadata"]["themisto_dropped"]["image/png"] > 5000


def test_every_output_arrives_though_the_kernel_replies_without_waiting(kernel: Recorder) -> None:
    # The install sets ipykernel's wait before each reply (0.5 ms, against clients that stop reading at the reply)
    # to zero: the recorder reads a request's outputs until its idle status, which comes after them on iopub.
    reply = kernel.request({"wait": "get_ipython().kernel._execute_sleep"}, 10).reply or {}
    assert reply["content"]["user_expressions"]["wait"]["data"]["text/plain"] == "0.0"
    code = (
        "import sys\nfrom IPython.display import display\n"
        "print('a', end='')\nsys.stderr.write('b')\ndisplay('c')\n_ = sys.stdout.write('d')"
    )
    for number in range(40):  # the last write is flushed only just before the reply
        step = kernel.run_cell(f"{code}  # {number}", f"flush-{number}")
        kinds = [
            (o["output_type"], o.get("name"), o.get("text") or o.get("data", {}).get("text/plain"))
            for o in step.outputs
        ]
        assert kinds == [
            ("stream", "stdout", "a"),
            ("stream", "stderr", "b"),
            ("display_data", None, "'c'"),
            ("stream", "stdout", "d"),
        ]


def test_stdout_and_stderr_arrive_in_the_order_the_cell_wrote_them(kernel: Recorder) -> None:
    # ipykernel sends a stream's text from a timer 0.2 s after a write; the timer of stderr's first write, flushed at
    # once, still fires at 0.2 s and sent "b" while "a", written before it, waited for stdout's timer at 0.3 s
    code = (
        "import sys, time\nsys.stderr.write('x')\nsys.stderr.flush()\ntime.sleep(0.1)\n"
        "print('a', end='')\nsys.stderr.write('b')\ntime.sleep(0.3)\nprint('c', end='')"
    )
    step = kernel.run_cell(code, "in-order")
    assert [(o["name"], o["text"]) for o in step.outputs] == [
        ("stderr", "x"),
        ("stdout", "a"),
        ("stderr", "b"),
        ("stdout", "c"),
    ]


def test_a_silent_request_ends_at_its_reply_and_the_next_cell_waits_for_its_own_idle(kernel: Recorder) -> None:
    # A silent request's outputs belong to no step: it ends at its reply, and what the kernel does after it (its
    # flushes and idle status, here made to take 1.5 s once) overlaps the host's next work instead of adding to it
    slow_once = (
        "(lambda kernel, hook, time: setattr(kernel, 'post_handler_hook',"
        " lambda: (setattr(kernel, 'post_handler_hook', hook), hook(), time.sleep(1.5))))"
        "(get_ipython().kernel, get_ipython().kernel.post_handler_hook, __import__('time'))"
    )
    started = time.monotonic()
    execution = kernel.request({"slow": slow_once}, 10)
    assert time.monotonic() - started < 1.0
    assert execution.reply is not None and execution.reply["content"]["user_expressions"]["slow"]["status"] == "ok"
    # the next cell starts only after that, and the earlier request's idle status does not end it
    step = kernel.run_cell("import time\ntime.sleep(0.2)\nprint('after')", "after")
    assert [(o["output_type"], o.get("text")) for o in step.outputs] == [("stream", "after\n")]
    assert step.error is None


# Counts the kernel's real flushes of sys.stdout (ipykernel's ``_flush``, which its ``flush`` hands the IO thread,
# as its timer does) in a list of the kernel's sys.modules, and reads the count
COUNT_FLUSHES = (
    "(lambda sys, count: (sys.modules.__setitem__('_test_flushes', count),"
    " setattr(sys.stdout, '_flush', (lambda flush: lambda: (count.append(1), flush())[1])(sys.stdout._flush)))[0])"
    "(__import__('sys'), [])"
)
FLUSHES = "len(__import__('sys').modules['_test_flushes'])"


def _flushes(kernel: Recorder) -> int:
    """How often the kernel's stdout has really been flushed since COUNT_FLUSHES, read in a silent request."""
    reply = kernel.request({"count": FLUSHES}, 10).reply
    assert reply is not None
    return int(reply["content"]["user_expressions"]["count"]["data"]["text/plain"])


def test_a_silent_request_with_nothing_to_send_skips_the_flush_and_a_cell_flushes(fresh_kernel: Recorder) -> None:
    kernel = fresh_kernel
    assert kernel.request({"count": COUNT_FLUSHES}, 10).reply is not None
    kernel.request({"quiet": "1 + 1"}, 10)
    assert _flushes(kernel) == 0  # two silent requests with nothing written: ipykernel flushes each twice (4 before)
    step = kernel.run_cell("print('cell')", "cell")
    assert step.output == "cell"
    after_cell = _flushes(kernel)
    assert after_cell >= 2  # before the cell's reply and before its idle status, as ipykernel flushes
    # text written in a silent request is flushed under it, and never reaches the next cell's output
    kernel.request({"loud": "print('from a silent request')"}, 10)
    assert _flushes(kernel) > after_cell
    step = kernel.run_cell("print('next')", "next")
    assert [(o["output_type"], o.get("text")) for o in step.outputs] == [("stream", "next\n")]


def test_undecodable_output_is_replaced_not_fatal(kernel: Recorder) -> None:
    step = kernel.run_cell(
        "import sys\nsys.stdout.write('ok ' + b'\\xff\\xfe'.decode('utf-8', 'surrogateescape') + '\\n')\n"
        "class Odd:\n    def __repr__(self):\n        return 'odd\\udcff'\nodd = Odd()",
        "bytes",
    )
    assert step.error is None and step.output.startswith("ok ")
    step.to_json().encode("utf-8")  # raises if a lone surrogate survived
    odd = next(variable for variable in step.runtime if variable.name == "odd")
    assert odd.repr.startswith("odd") and not odd.repr_failed


def test_bad_reprs_are_flagged_but_the_step_is_fine(kernel: Recorder) -> None:
    step = kernel.run_cell(
        "class Raises:\n    def __repr__(self):\n        raise RuntimeError('no')\n"
        "class Hangs:\n    def __repr__(self):\n        while True: pass\n"
        "raises, hangs, fine = Raises(), Hangs(), [1, 2]",
        "reprs",
    )
    runtime = {variable.name: variable for variable in step.runtime}
    assert step.error is None
    assert runtime["raises"].repr_failed and "RuntimeError" in runtime["raises"].repr
    assert runtime["hangs"].repr_failed and "timed out" in runtime["hangs"].repr
    assert runtime["fine"].repr == "[1, 2]" and runtime["fine"].len == 2
    kernel.run_cell("del raises, hangs, Raises, Hangs", "cleanup")


def test_memory_is_the_kernel_rss(kernel: Recorder) -> None:
    before = kernel.run_cell("pass", "m0").memory_bytes
    after = kernel.run_cell("block = b'x' * (100 * 2**20)", "m1").memory_bytes
    kernel.run_cell("del block", "m2")
    assert before > 10 * 2**20 and after - before > 80 * 2**20


def test_memory_is_the_rss_psutil_reads_and_follows_the_kernel_across_a_restart(fresh_kernel: Recorder) -> None:
    session = fresh_kernel.session
    for turn in range(2):  # the kernel, then the process that replaced it
        fresh_kernel.run_cell("block = b'x' * (64 * 2**20)", f"m{turn}")
        read, rss = session.memory(), psutil.Process(session._process.pid).memory_info().rss
        assert read is not None and read > 64 * 2**20 and abs(read - rss) < 4 * 2**20
        fresh_kernel.restart()
        renewed = session.memory()  # the new process, without the block
        assert renewed is not None and renewed < read - 48 * 2**20
    session._process.kill()
    session._process.wait(10)
    assert session.memory() is None  # ended: no other process's memory, whoever gets its pid


def test_equal_states_hash_equal(kernel: Recorder) -> None:
    first = kernel.run_cell("hashed = 1", "h0").state_hash
    second = kernel.run_cell("other = 2", "h1").state_hash
    third = kernel.run_cell("del other", "h2").state_hash
    assert first == third != second


# --- faults that need a fresh kernel --------------------------------------------------------


def test_dead_kernel_is_a_step_then_restart(fresh_kernel: Recorder) -> None:
    fresh_kernel.run_cell("lost = 1", "a")
    dead = fresh_kernel.run_cell("import os\nos._exit(7)", "die")
    assert dead.error["ename"] == "DeadKernelError" and "exit code 7" in dead.error["evalue"]
    assert dead.runtime == [] and dead.memory_bytes is None
    after = fresh_kernel.run_cell("'lost' in dir()", "b")
    assert after.restarted and after.output == "False" and after.step == 2
    assert not fresh_kernel.run_cell("1", "c").restarted


def test_restart_empties_the_namespace_and_marks_the_next_step(fresh_kernel: Recorder) -> None:
    assert [v.name for v in fresh_kernel.run_cell("gone = 1", "a").runtime] == ["gone"]
    fresh_kernel.restart()
    step = fresh_kernel.run_cell("'gone' in dir()", "b")
    assert step.restarted and step.output == "False" and step.runtime == []


@pytest.mark.kernel
@pytest.mark.parametrize(
    ("behaviour", "caught", "timeout"),
    [("import time; time.sleep(120)", TimeoutError, True), ("import sys; sys.exit(3)", RuntimeError, False)],
    ids=["never-answers", "dies"],
)
def test_a_kernel_that_does_not_start_raises_the_built_in_error_a_caller_catches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str, caught: type[Exception], timeout: bool
) -> None:
    spec = tmp_path / "kernels" / "broken"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-c", behaviour, "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "broken", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setattr(transport, "KERNEL_START_TIMEOUT", 4.0)
    recorder = Recorder("t", tmp_path, replace(KERNEL_OPTIONS, kernel_name="broken"))
    try:
        with pytest.raises(caught, match="did not start") as raised:
            recorder.start()
    finally:
        recorder.close()
    assert isinstance(raised.value, KernelError) and isinstance(raised.value, TimeoutError) is timeout


@pytest.mark.kernel
@pytest.mark.parametrize("broken", ["1 / 0", "__import__('sys').modules['_themisto_no_such_module'].bind()"])
def test_an_install_the_kernel_does_not_take_is_an_error(tmp_path: Path, broken: str) -> None:
    # the installs are user expressions: one that raises leaves the reply's own status "ok", so each is checked
    recorder = Recorder("t", tmp_path, KERNEL_OPTIONS, installs={"install fine": "None", "install broken": broken})
    try:
        with pytest.raises(KernelError, match="did not take the code it was given to install"):
            recorder.start()
    finally:
        recorder.close()


@pytest.mark.kernel
def test_a_kernel_whose_set_up_fails_is_shut_down(tmp_path: Path) -> None:
    recorder = Recorder("t", tmp_path, KERNEL_OPTIONS, installs={"install broken": "1 / 0"})
    with pytest.raises(KernelError, match="did not take"), recorder:
        pytest.fail("the block ran")
    kernel = recorder.session._process  # the kernel process, found once it answered
    assert kernel is not None and (not kernel.is_running() or kernel.status() == psutil.STATUS_ZOMBIE)
    assert recorder.session._manager is None


@pytest.mark.kernel
def test_the_installs_bind_no_name_and_count_no_execution(tmp_path: Path) -> None:
    probe = "[name for name in globals() if not name.startswith('_')], len(In), __import__('sys').modules['_marker']"
    marker = "__import__('sys').modules.__setitem__('_marker', __import__('types').ModuleType('_marker'))"
    with Recorder("t", tmp_path, KERNEL_OPTIONS, installs={"install marker": marker}) as recorder:
        step = recorder.run_cell(probe, "c")
    # IPython's own names alone; the first cell is In[1]; the install (evaluated after the snapshot's) ran
    assert step.output.startswith("(['In', 'Out', 'get_ipython', 'exit', 'quit', 'open'], 2, <module '_marker'")


@pytest.mark.kernel
def test_a_kernel_that_cannot_say_its_versions_still_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the versions are a report of the install request, not an install: their error gives None, not a KernelError
    monkeypatch.setattr(inject, "versions_expression", lambda: "1 / 0")
    with Recorder("t", tmp_path, KERNEL_OPTIONS) as recorder:
        step = recorder.run_cell("1 + 1", "c")
    assert recorder.kernel_versions == {"python": None, "ipykernel": None}
    assert step.output == "2" and step.snapshot_error is None  # the snapshot module was installed all the same
