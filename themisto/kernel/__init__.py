"""The live kernel that record, stability and exec-score share: its process, its sandbox, its snapshots.

A stage imports the names below from this package, never one of its modules. The code that runs inside the
kernel is the sub-package :mod:`themisto.kernel.inside` (standard library only).

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
