"""Run fuzz cases (``tests/fuzz_data.py``) in a worker subprocess, so that a crash fails one case.

A segfault or an abort in a numba kernel would kill pytest (or the fuzz script) outright.
:class:`CaseRunner` keeps one worker process, sends it one case at a time as a JSON line and
reads one JSON result line back. If the worker dies, the case it was running is reported with
``status="crash"`` (the signal and the tail of the worker's stderr, where :mod:`faulthandler`
writes the Python stack of the crash) and a fresh worker takes the next case; a case that runs
longer than ``timeout`` seconds is reported with ``status="timeout"`` and its worker killed.

The time numba spends compiling does not count: a cold cache compiles for minutes (more under
``NUMBA_BOUNDSCHECK=1`` and on a loaded machine), and that is no hang. The worker writes a
heartbeat line once it has started (its imports done) and each time numba finishes compiling a
function (numba's compile events), and each heartbeat gives the case ``timeout`` seconds afresh,
so only ``timeout`` seconds without any finished compilation count as a hang.

Run as ``python -m tests.fuzz_worker`` (from the repository root) it is the worker itself.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The line a worker writes once started and whenever numba has compiled a function: busy, not hung.
HEARTBEAT = b"compiled\n"


class CaseRunner:
    """Parent side: run cases one by one in a (restarted on demand) worker subprocess.

    Parameters
    ----------
    timeout : float, default 600
        Seconds one case may take (build + search + check) before it counts as a hang, counted from the
        case's start or from the last function numba finished compiling for it (module docstring).
    env : dict, optional
        Extra environment variables of the worker (e.g. ``{"NUMBA_NUM_THREADS": "2"}``).
    """

    def __init__(self, *, timeout: float = 600.0, env: dict | None = None):
        self.timeout = timeout
        self.env = env or {}
        self.starts = 0
        self._proc = None
        self._stderr = None
        self._lines = b""

    def _start(self):
        self.close()
        self._lines = b""
        env = dict(os.environ)
        env.update(self.env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            cwd=ROOT, env=env, text=True, bufsize=1,
        )
        self.starts += 1

    def _stderr_tail(self, lines=25):
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        kept = [line for line in text.strip().splitlines() if not line.startswith("Extension modules:")]
        return "\n".join(kept[-lines:])

    def run(self, case: dict) -> dict:
        """Result dict of :func:`tests.fuzz_data.run_case`, or ``status`` ``"crash"`` / ``"timeout"``."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        try:
            self._proc.stdin.write(json.dumps(case) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            return self._crashed()
        while True:
            line = self._read_line()
            if line is None:
                self._proc.kill()
                self._proc.wait()
                tail = self._stderr_tail()
                self._proc = None
                return {"status": "timeout", "problems": [f"no answer after {self.timeout:g} s", tail],
                        "seconds": self.timeout}
            if not line:
                return self._crashed()
            if line != HEARTBEAT:
                return json.loads(line)

    def _read_line(self):
        """The worker's next line (bytes, with its newline); ``b""`` when the worker closed its output, ``None``
        when ``timeout`` seconds passed without a whole line. Read from the pipe itself, never through a
        buffered file: lines that arrive together must not wait in a buffer that ``select`` cannot see."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._lines:
            ready, _, _ = select.select([fd], [], [], self.timeout)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self._lines += chunk
        line, _, self._lines = self._lines.partition(b"\n")
        return line + b"\n"

    def _crashed(self):
        code = self._proc.wait()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = self._stderr_tail()
        self._proc = None
        return {"status": "crash", "problems": [f"worker died with {how}", tail], "seconds": float("nan")}

    def close(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _worker_main():
    """Read cases from stdin, write one JSON result per line on the original stdout."""
    import faulthandler

    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed (Python or C level) goes to stderr
    sys.stdout = sys.stderr
    faulthandler.enable()

    from numba.core import event

    from tests.fuzz_data import run_case

    class Heartbeat(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            results.write(HEARTBEAT.decode())

    event.register("numba:compile", Heartbeat())
    results.write(HEARTBEAT.decode())  # imported and ready: the start-up does not count either

    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        if case.get("pair") == "__segfault__":  # lets tests/test_fuzz.py check that crashes are reported
            import ctypes

            ctypes.string_at(0)
        if case.get("pair") == "__slow_compiles__":  # lets tests/test_fuzz.py check the timeout (module docstring)
            results.write(json.dumps(_slow_compiles(**case["params"])) + "\n")
            continue
        results.write(json.dumps(run_case(case)) + "\n")


def _slow_compiles(compiles, pause):
    """Compile ``compiles`` fresh numba functions with ``pause`` seconds before each (``compiles = 0``: sleep
    ``pause`` seconds); the result of a case that took that long."""
    import time

    import numba

    if compiles == 0:
        time.sleep(pause)
    for i in range(compiles):
        time.sleep(pause)
        numba.njit(lambda x, i=i: x + i)(1)
    return {"status": "ok", "problems": [], "seconds": compiles * pause}


if __name__ == "__main__":
    _worker_main()
