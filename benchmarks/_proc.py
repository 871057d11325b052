"""Memory figures of a process from ``/proc/<pid>/status`` (Linux), and the peak sampler's loop.

No imports beyond the standard library: :class:`_common.PeakSampler` runs this
file as a script in a separate process, which must start in milliseconds::

    python _proc.py <pid> <field> <interval seconds>

samples ``field`` (e.g. ``RssAnon``, ``VmRSS``) of process ``pid`` every
``interval`` seconds, prints ``ready`` after the first sample and, once its
stdin is closed (or the process is gone), the largest value in bytes.
"""

from __future__ import annotations

import select
import sys


def status_bytes(field, pid="self"):
    """``field`` of ``/proc/<pid>/status`` (a ``kB`` figure) in bytes."""
    prefix = field + ":"
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(prefix):
                return int(line.split()[1]) * 1024
    raise KeyError(f"no {field} in /proc/{pid}/status")


def sample_peak(pid, field, interval):
    """The loop of the sampler process (see the module docstring)."""
    peak = 0
    announced = False
    while True:
        try:
            peak = max(peak, status_bytes(field, pid))
        except OSError:
            break
        if not announced:
            print("ready", flush=True)
            announced = True
        if select.select([sys.stdin], [], [], interval)[0]:
            break
    print(peak, flush=True)


if __name__ == "__main__":
    sample_peak(sys.argv[1], sys.argv[2], float(sys.argv[3]))
