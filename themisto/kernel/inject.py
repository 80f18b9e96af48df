"""Host side of the kernel boundary: the code that installs :mod:`themisto.kernel.inside` in a kernel, and the
``user_expression`` texts that call it.

A kernel-side module is sent as a code object compiled here (and as source text, for a kernel of another
interpreter) and executed into a private module of ``sys.modules`` (no name is bound in the user namespace);
every call into it is a ``user_expression`` naming that module.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import marshal
import zlib
from pathlib import Path

from themisto.kernel.inside import channels, fork, landlock, namespaces, seccomp, snapshot, wire


@functools.cache
def module_install_expression(path: str, name: str, filename: str, after: str | None = None) -> str:
    """The expression that executes the module source at ``path`` into ``sys.modules[name]`` of the kernel.

    The module is compiled here, once per process, and the kernel loads that code object where its bytecode is
    this interpreter's (the same magic number); another interpreter compiles the source itself. Compiling the
    kernel-side modules took 34 of the 55 ms of a kernel's set-up, loading them 3 ms, and exec-score sets up a
    kernel per trajectory and per restart. ``after`` names a function of the module to call once it is installed.
    """
    source = Path(path).read_text(encoding="utf-8")
    # as the kernel would compile it: without this module's __future__ flags, asserts kept
    code = marshal.dumps(compile(source, filename, "exec", dont_inherit=True, optimize=0))
    then = f", module.{after}()" if after else ""
    # Lambda parameters are locals, so nothing lands in the user namespace.
    return (
        f"(lambda module, unpack: (exec(__import__('marshal').loads(unpack({_packed(code)!r}))"
        f" if __import__('importlib.util').util.MAGIC_NUMBER == {importlib.util.MAGIC_NUMBER!r}"
        f" else compile(unpack({_packed(source.encode())!r}), {filename!r}, 'exec'), module.__dict__),"
        f" __import__('sys').modules.__setitem__({name!r}, module){then}))"
        f"(__import__('types').ModuleType({name!r}),"
        " lambda text: __import__('zlib').decompress(__import__('binascii').a2b_base64(text)))"
    )


def _packed(data: bytes) -> str:
    """``data`` compressed, in base64: the install request's size, parsed on both sides, costs time too."""
    return base64.b64encode(zlib.compress(data, 9)).decode("ascii")


def _call(module: str, function: str, arguments: str) -> str:
    """The expression that calls ``function(arguments)`` of the installed kernel-side ``module``."""
    return f"__import__('sys').modules[{module!r}].{function}({arguments})"


# The code of an install request: the modules go as its user expressions, which the kernel evaluates in order
# after the code. As the code itself, each module's source text (a literal of tens of kilobytes) went through
# IPython's input transformers first: 20 to 35 ms a module, against 2 to 8 ms to compile it.
INSTALL_CODE = "pass"


def snapshot_install_expressions(stream_budget: int) -> dict[str, str]:
    """The user expressions, in order, that install the wire and snapshot modules, guard the kernel's streams,
    and bind its messages' packing and cut their stream text to ``stream_budget`` characters a request."""
    return {
        "install wire": module_install_expression(wire.__file__, wire.MODULE_NAME, "<themisto-wire>"),
        "install snapshot": module_install_expression(
            snapshot.__file__, snapshot.MODULE_NAME, "<themisto-snapshot>", after="install"
        ),
        "install channels": module_install_expression(channels.__file__, channels.MODULE_NAME, "<themisto-channels>"),
        "guard channels": _call(channels.MODULE_NAME, "install", str(int(stream_budget))),
    }


def _decoded(record: wire.Record) -> str:
    """The expression that decodes ``record`` in the kernel with the installed wire module."""
    return _call(wire.MODULE_NAME, f"{type(record).__name__}.from_json", repr(record.to_json()))


def snapshot_expression(request: wire.SnapshotRequest) -> str:
    """The ``user_expression`` that takes a snapshot once the module is installed (see ``snapshot.take``)."""
    return _call(snapshot.MODULE_NAME, "take", _decoded(request))


def versions_expression() -> str:
    """The ``user_expression`` that reports ``snapshot.versions`` once the module is installed."""
    return _call(snapshot.MODULE_NAME, "versions", "")


def fork_install_expressions() -> dict[str, str]:
    """The user expressions, in order, that install the modules of a forked run (Landlock, seccomp, namespaces,
    the run itself), after the snapshot's.

    ``fork.bind`` then takes the other modules' functions it calls, so a later cell that replaces an entry of
    ``sys.modules`` changes nothing in the children.
    """
    return {
        "install landlock": module_install_expression(landlock.__file__, fork.LANDLOCK_MODULE, "<themisto-landlock>"),
        "install seccomp": module_install_expression(seccomp.__file__, fork.SECCOMP_MODULE, "<themisto-seccomp>"),
        "install namespaces": module_install_expression(
            namespaces.__file__, fork.NAMESPACES_MODULE, "<themisto-namespaces>"
        ),
        "install fork": module_install_expression(fork.__file__, fork.MODULE_NAME, "<themisto-fork>", after="bind"),
    }


def fork_run_expression(request: wire.ForkRequest) -> str:
    """The ``user_expression`` that runs ``fork.run`` on ``request`` once the module is installed."""
    return _call(fork.MODULE_NAME, "run", _decoded(request))
