"""Run fuzz cases (``tests/fuzz_data.py``) in a worker subprocess, so that a crash fails one case.

A segfault or an abort in a numba kernel would kill pytest (or the fuzz script) outright.
:class:`CaseRunner` keeps one worker process, sends it one case at a time as a JSON line and
reads one JSON result line back. If the worker dies, the case it was running is reported with
``status="crash"`` (the signal and the tail of the worker's stderr, where :mod:`faulthandler`
writes the Python stack of the crash) and a fresh worker takes the next case; a case that runs
longer than ``timeout`` seconds is reported with ``status="timeout"`` and its worker killed.

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


class CaseRunner:
    """Parent side: run cases one by one in a (restarted on demand) worker subprocess.

    Parameters
    ----------
    timeout : float, default 600
        Seconds one case may take (build + search + check) before it counts as a hang.
    env : dict, optional
        Extra environment variables of the worker (e.g. ``{"NUMBA_NUM_THREADS": "2"}``).
    """

    def __init__(self, *, timeout: float = 600.0, env: dict | None = None):
        self.timeout = timeout
        self.env = env or {}
        self.starts = 0
        self._proc = None
        self._stderr = None

    def _start(self):
        self.close()
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
        ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout)
        if not ready:
            self._proc.kill()
            self._proc.wait()
            tail = self._stderr_tail()
            self._proc = None
            return {"status": "timeout", "problems": [f"no answer after {self.timeout:g} s", tail], "seconds": self.timeout}
        line = self._proc.stdout.readline()
        if not line:
            return self._crashed()
        return json.loads(line)

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

    from tests.fuzz_data import run_case

    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        if case.get("pair") == "__segfault__":  # lets tests/test_fuzz.py check that crashes are reported
            import ctypes

            ctypes.string_at(0)
        results.write(json.dumps(run_case(case)) + "\n")


if __name__ == "__main__":
    _worker_main()
