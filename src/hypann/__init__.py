"""hypann: nearest-neighbour search for hyperbolic embeddings.

Implements Wu & Charikar, *Nearest Neighbor Search for Hyperbolic Embeddings*
(Recentering, Binary-Search and Spherical-Shell search on top of any Euclidean
nearest-neighbour oracle) and goes past it. Start with :class:`HyperbolicIndex`.

This module is the package's public face, above every layer but the
applications (:mod:`hypann.apps`); modules inside the package import what they
need from the module that defines it, never from ``hypann`` itself (see
``docs/architecture.md``).

``import hypann`` is cheap: the public names below (and the subpackages
``hypann.datasets``, ``hypann.sklearn``, ...) are imported on first use
(PEP 562), so numba and scipy load only when an index is made.
"""

from __future__ import annotations

import importlib

from hypann._version import __version__

# public name -> module that defines it
_EXPORTS = {
    "HyperbolicIndex": "hypann.index",
    "DEFAULT_ALGORITHM": "hypann.index",
    "verify_file": "hypann.index",
    "read_metadata": "hypann.io",
    "SearchResult": "hypann.result",
    "SearchStats": "hypann.result",
    "RangeSearchResult": "hypann.result",
    "Float32PrecisionWarning": "hypann.result",
    "ShardedIndex": "hypann.distributed",
}
_SUBPACKAGES = ("datasets", "eval", "geometry", "graph", "oracles", "search", "sklearn", "embed", "distributed")


def load(path, **overrides):
    """Read an index saved with :meth:`HyperbolicIndex.save` (see :meth:`HyperbolicIndex.load`).

    ``mmap=True`` maps a format-3 file instead of reading it; ``verify="full"`` or
    ``"structure"`` says how much of it is checked (:func:`hypann.io.load_index`).
    """
    from hypann.index import HyperbolicIndex

    return HyperbolicIndex.load(path, **overrides)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"hypann.{name}")
    raise AttributeError(f"module 'hypann' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBPACKAGES))


__all__ = ["HyperbolicIndex", "DEFAULT_ALGORITHM", "verify_file", "SearchResult", "SearchStats", "RangeSearchResult", "load",
           "read_metadata", "Float32PrecisionWarning", "__version__"]
