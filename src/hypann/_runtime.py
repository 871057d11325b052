"""Process-level runtime settings: numba threads per call, and the first-compile notice.

``numba_threads(n_jobs)`` sets the number of threads numba's parallel kernels
use for the calling thread only (numba keeps it per thread), so concurrent
searches with different ``n_jobs`` do not interfere. Every kernel of hypann
gives the same answer for any thread count: the parallel loops run over
queries (or points) and each iteration is independent.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from numbers import Integral

log = logging.getLogger("hypann")

_NOTICE_SHOWN = False


def check_n_jobs(n_jobs, *, name="n_jobs"):
    """``None`` or ``-1`` (all cores) or a positive int; returns the thread count to use."""
    import numba

    limit = numba.config.NUMBA_NUM_THREADS
    if n_jobs is None or (not isinstance(n_jobs, bool) and isinstance(n_jobs, Integral) and n_jobs == -1):
        return limit
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral) or n_jobs < 1:
        raise ValueError(f"{name} must be a positive integer, -1 or None (all cores), got {name}={n_jobs!r}")
    return min(int(n_jobs), limit)


@contextmanager
def numba_threads(n_jobs):
    """Run the enclosed numba kernels on ``n_jobs`` threads (see :func:`check_n_jobs`)."""
    import numba

    threads = check_n_jobs(n_jobs)
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield threads
    finally:
        numba.set_num_threads(before)


def notice_first_compile(*dispatchers):
    """Log one line (once per process) when a numba kernel has no on-disk cache yet.

    The message goes through the ``hypann`` logger at WARNING level, which
    Python prints to stderr when the application configured no logging;
    silence it with ``logging.getLogger("hypann").setLevel(logging.ERROR)``.
    """
    global _NOTICE_SHOWN
    if _NOTICE_SHOWN:
        return
    for dispatcher in dispatchers:
        try:  # numba's cache layout is private: no notice rather than an error
            index_path = dispatcher._cache._cache_file._index_path
        except AttributeError:
            return
        if not os.path.exists(index_path):
            _NOTICE_SHOWN = True
            log.warning("hypann: compiling numba kernels for first use (about a minute, once; cached on disk)")
            return
