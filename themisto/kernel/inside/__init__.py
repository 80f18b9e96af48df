"""Code that runs inside the user's kernel: the namespace snapshot and the forked run of predictions.

Each module here is sent to a kernel compiled (or as source text) and executed into a private module of ``sys.modules``
(:mod:`themisto.kernel.inject` does that and builds the expressions that call it), so a module here imports
only the standard library (and IPython objects the kernel already has), never another Themisto module; a test
fails on any other import. They are importable in-process, so their helpers are tested directly.

- :mod:`themisto.kernel.inside.snapshot`: describes the user namespace after each cell (``take``).
- :mod:`themisto.kernel.inside.fork`: runs predictions in forked copies of the kernel (``run``).
- :mod:`themisto.kernel.inside.landlock`: confines a process with Linux Landlock (``confine``).
- :mod:`themisto.kernel.inside.seccomp`: refuses the system calls no kernel or prediction needs (``confine``).
- :mod:`themisto.kernel.inside.namespaces`: user, IPC and network namespaces without capabilities (``enter``).
- :mod:`themisto.kernel.inside.wire`: the request and result records both sides of the boundary share.
- :mod:`themisto.kernel.inside.channels`: the kernel's own messages: install-time packer, stream text cut.
"""
