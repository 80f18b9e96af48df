"""A kernel-side module is installed from the code object the host compiled where the kernel's interpreter reads
its bytecode, and from its source otherwise; either way the module is the same."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from themisto.kernel import inject
from themisto.kernel.inside import wire

# A fresh interpreter installs the wire module by the host's expression, after ``prelude``, and says what it got.
PROGRAM = textwrap.dedent(
    """
    import json, sys
    {prelude}
    eval(sys.stdin.read())
    module = sys.modules[{name!r}]
    record = module.fault("fault", "KernelError", "no answer")
    print(json.dumps({{"filename": module.ChildResult.from_json.__code__.co_filename,
                       "round trip": module.ChildResult.from_json(record.to_json()).to_json()}}))
    """
)
NO_COMPILE = textwrap.dedent(
    """
    import builtins
    original = builtins.compile
    def refused(source, filename, *args, **kwargs):
        if filename == "<themisto-wire>":
            raise AssertionError("compiled in the kernel")
        return original(source, filename, *args, **kwargs)
    builtins.compile = refused
    """
)
OTHER_INTERPRETER = textwrap.dedent(
    """
    import importlib.util, marshal
    importlib.util.MAGIC_NUMBER = b"\\x00\\x00\\r\\n"
    original = marshal.loads
    def refused(data, *args):
        if sys._getframe(1).f_code.co_name == "<lambda>":  # the install expression's, not the import system's
            raise AssertionError("loaded the host's bytecode")
        return original(data, *args)
    marshal.loads = refused
    """
)


def _installed(prelude: str) -> dict[str, str | None]:
    """What a fresh interpreter made of the wire module's install expression after ``prelude``."""
    expression = inject.module_install_expression(wire.__file__, wire.MODULE_NAME, "<themisto-wire>")
    program = PROGRAM.format(prelude=prelude, name=wire.MODULE_NAME)
    done = subprocess.run(
        [sys.executable, "-c", program], input=expression, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, str | None] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize(
    "prelude", [pytest.param(NO_COMPILE, id="same interpreter"), pytest.param(OTHER_INTERPRETER, id="other")]
)
def test_a_module_installs_from_the_hosts_code_or_from_its_source(prelude: str) -> None:
    # the same interpreter never compiles (compile refuses); another never loads the host's bytecode (marshal refuses)
    found = _installed(prelude)
    assert found["filename"] == "<themisto-wire>"
    record = wire.fault("fault", "KernelError", "no answer")
    assert found["round trip"] == record.to_json()


def test_the_same_module_comes_either_way() -> None:
    assert _installed(NO_COMPILE) == _installed(OTHER_INTERPRETER)


def test_the_hosts_code_is_compiled_without_the_hosts_future_flags(tmp_path: Path) -> None:
    # inject.py has ``from __future__ import annotations``: a module without it keeps its annotations evaluated,
    # as a kernel compiling its source would
    source = tmp_path / "plain.py"
    source.write_text("def f(x: int) -> None:\n    return None\n", encoding="utf-8")
    namespace: dict[str, object] = {}
    eval(inject.module_install_expression(str(source), "themisto-test-plain", "<plain>"), namespace)  # noqa: S307
    installed = sys.modules.pop("themisto-test-plain")
    assert installed.f.__annotations__ == {"x": int, "return": None}
    assert namespace.keys() <= {"__builtins__"}  # nothing bound beside the module
