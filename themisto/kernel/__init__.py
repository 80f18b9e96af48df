"""The live kernel that record, stability and exec-score share: its process, its sandbox, its snapshots.

A stage imports the names below from this package, never one of its modules. The code that runs inside the
kernel is the sub-package :mod:`themisto.kernel.inside` (standard library only).

- :mod:`~themisto.kernel.options`: the kernel's options, and how a trajectory's own options prevail
- :mod:`~themisto.kernel.environment`: the kernel's scrubbed environment, kernel spec and limits
- :mod:`~themisto.kernel.launcher`: the process that supervises a kernel: limits, no process left behind
- :mod:`~themisto.kernel.transport`: one kernel process, its channels, an execute request and its faults
- :mod:`~themisto.kernel.snapshots`: the snapshot a kernel sends back, checked against what the host knows
- :mod:`~themisto.kernel.recorder`: the recorder: a kernel's cells, snapshots and faults as steps
- :mod:`~themisto.kernel.forking`: the forking session exec-score replays in, and its checks
- :mod:`~themisto.kernel.inject`: installs the kernel-side code (:mod:`themisto.kernel.inside`) and calls it
- :mod:`~themisto.kernel.outputs`: outputs collected, rendered as text, normalised
- :mod:`~themisto.kernel.inside`: the code that runs inside the kernel
"""

from themisto.kernel.environment import FORK_ABI, has_credentials, kernel_environment
from themisto.kernel.forking import ForkingSession, RiddenFork, state_key
from themisto.kernel.inside.fork import copy_tree
from themisto.kernel.inside.snapshot import clean_text
from themisto.kernel.inside.wire import ChildResult
from themisto.kernel.options import ENVIRONMENT, TRUST, KernelOptions, chosen_options, saved_options, with_recorded
from themisto.kernel.outputs import (
    MEMORY_ADDRESS,
    OutputCollector,
    joined_text,
    mask_machine_text,
    normalize_output,
    render_outputs,
)
from themisto.kernel.recorder import DEAD_KERNEL_ERROR, Recorder, check_options
from themisto.kernel.transport import Stopped

__all__ = [
    "ChildResult",
    "DEAD_KERNEL_ERROR",
    "ENVIRONMENT",
    "FORK_ABI",
    "ForkingSession",
    "RiddenFork",
    "KernelOptions",
    "MEMORY_ADDRESS",
    "OutputCollector",
    "Recorder",
    "Stopped",
    "TRUST",
    "check_options",
    "chosen_options",
    "clean_text",
    "copy_tree",
    "has_credentials",
    "joined_text",
    "kernel_environment",
    "mask_machine_text",
    "normalize_output",
    "render_outputs",
    "saved_options",
    "state_key",
    "with_recorded",
]
