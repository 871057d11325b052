"""Progress feedback for long work: one tqdm bar per thread, on stderr, only on a terminal.

Long work opens a *task* with :func:`task`; code below it (a build's
NN-descent rounds, the chunks of a ground-truth computation) reports with
:func:`advance`, without knowing whether anybody shows a bar::

    with task("build graph", enabled=verbose):
        for r in range(rounds):
            ...
            advance(stage=f"nn-descent round {r + 1}")

Rules:

* The outermost open task of the calling thread owns the only bar. A task
  opened inside it draws no second bar: its description and its own
  ``done/total`` count are shown as the owner's postfix
  (``reproduce 1/2 [01:20] build graph 3/? nn-descent round 3``).
* A bar is drawn only when stderr is a terminal (tqdm's ``disable=None``),
  the task is ``enabled`` (the ``verbose`` option of the caller) and, when
  ``delay`` is given, once that many seconds have passed at an update: short
  work stays silent.
* :func:`advance` without an open task does nothing, so library code can call
  it unconditionally.
* :func:`write` prints a line without breaking a bar that is being drawn.

Tasks are tracked in a :class:`contextvars.ContextVar`, so threads (and
asyncio tasks) each have their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time

__all__ = ["task", "advance", "write"]

_CURRENT = contextvars.ContextVar("hypann_progress_task", default=None)
#: Nested tasks redraw the owner's postfix at most this often (seconds).
_REDRAW_S = 0.2


class _Task:
    """One open task: its count, and the bar of the outermost task (``None`` when not drawn)."""

    __slots__ = ("desc", "total", "done", "owner", "bar", "started", "shown")

    def __init__(self, desc, total, owner, bar, delay=0.0):
        self.desc = desc
        self.total = total
        self.done = 0
        self.owner = owner  # the outermost task (self for the outermost)
        self.bar = bar
        self.started = time.monotonic() + delay  # nested reports redraw the bar from then on ...
        self.shown = -float("inf")  # ... at most every _REDRAW_S seconds


@contextlib.contextmanager
def task(desc, *, total=None, unit="step", enabled=True, delay=0.0):
    """Open a task; the outermost one shows a tqdm bar (see the module docstring).

    Parameters
    ----------
    desc : str
        What is being done (``"build hkdtree"``, ``"search"``).
    total : int, optional
        Number of units the task will :func:`advance`; ``None`` when unknown
        (the bar then counts without a percentage).
    unit : str, default "step"
        Name of one unit (``"q"`` for queries).
    enabled : bool, default True
        ``False`` draws nothing (the caller's ``verbose=False``); reports of
        nested tasks are dropped too.
    delay : float, default 0.0
        Seconds before the bar may appear; work that ends sooner shows nothing.

    Yields
    ------
    _Task
        The task (its ``done`` count can be read).
    """
    parent = _CURRENT.get()
    if parent is not None:
        current = _Task(desc, total, parent.owner, None)
        token = _CURRENT.set(current)
        try:
            yield current
        finally:
            _CURRENT.reset(token)
        return
    bar = None
    if enabled:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=desc, unit=unit, disable=None, file=sys.stderr, delay=delay)
    current = _Task(desc, total, None, bar, delay)
    current.owner = current
    token = _CURRENT.set(current)
    try:
        yield current
    finally:
        _CURRENT.reset(token)
        if bar is not None:
            bar.close()


def advance(n=1, *, stage=None):
    """Count ``n`` units of the innermost open task; ``stage`` names what comes next.

    Does nothing when no task is open in this thread.
    """
    current = _CURRENT.get()
    if current is None:
        return
    current.done += n
    bar = current.owner.bar
    if bar is None:
        return
    owner = current.owner
    if owner is current:
        if stage is not None:
            bar.set_postfix_str(stage, refresh=False)
        bar.update(n)  # redraws by tqdm's own clock (mininterval) ...
        if stage is None:
            return
    else:
        total = "?" if current.total is None else current.total
        bar.set_postfix_str(f"{current.desc} {current.done}/{total}" + (f" {stage}" if stage else ""), refresh=False)
    now = time.monotonic()  # ... a new stage or a nested report by ours, at most every _REDRAW_S
    if now >= owner.started and now - owner.shown >= _REDRAW_S:
        owner.shown = now
        bar.refresh()


def write(message):
    """Print ``message`` on stderr, above the bar when one is drawn."""
    current = _CURRENT.get()
    if current is not None and current.owner.bar is not None and not current.owner.bar.disable:
        current.owner.bar.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr, flush=True)
