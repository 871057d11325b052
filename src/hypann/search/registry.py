"""Algorithm names -> classes (``"recentering"``, ``"shells"``, ...), imported on first use.

A new algorithm (a :class:`~hypann.search.base.SearchAlgorithm` subclass in
``hypann.search`` or ``hypann.graph``) gets one entry in :data:`_ALGORITHMS`
and one branch in :func:`_load`: plain imports, so the import graph (checked by
``tests/test_architecture.py``) sees every dependency.
"""

from __future__ import annotations

from hypann import _params

# name -> defining module (for reading; the import itself is in _load)
_ALGORITHMS = {
    "auto": "hypann.search.auto",
    "brute": "hypann.search.brute",
    "recentering": "hypann.search.recentering",
    "binary_search": "hypann.search.binary_search",
    "shells": "hypann.search.shells",
    "random_shells": "hypann.search.shells",
    "hkdtree": "hypann.search.hkdtree_search",
    "vamana": "hypann.graph.vamana_search",
    "graph": "hypann.graph.graph_search",
}


def _load(name: str):
    """The class of algorithm ``name``, imported here on first use (``import hypann`` stays cheap)."""
    if name == "auto":
        from hypann.search.auto import AutoSearch as cls
    elif name == "brute":
        from hypann.search.brute import BruteForceSearch as cls
    elif name == "recentering":
        from hypann.search.recentering import RecenteringSearch as cls
    elif name == "binary_search":
        from hypann.search.binary_search import BinarySearchSearch as cls
    elif name == "shells":
        from hypann.search.shells import SphericalShellSearch as cls
    elif name == "random_shells":
        from hypann.search.shells import RandomizedShellSearch as cls
    elif name == "hkdtree":
        from hypann.search.hkdtree_search import HyperbolicKDTreeSearch as cls
    elif name == "vamana":
        from hypann.graph.vamana_search import VamanaSearch as cls
    elif name == "graph":
        from hypann.graph.graph_search import GraphSearch as cls
    else:  # pragma: no cover - _ALGORITHMS and _load name the same algorithms (tests/test_architecture.py)
        raise AssertionError(f"algorithm {name!r} is listed in _ALGORITHMS but not loaded by _load")
    return cls


def available_algorithms() -> list[str]:
    return sorted(_ALGORITHMS)


def algorithm_class(name: str):
    if name not in _ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {available_algorithms()}")
    return _load(name)


def settings_of(cls) -> list[str]:
    """Names of the build settings ``cls`` declares (``build_settings``), in order."""
    return _params.names(cls.build_settings)


def make_algorithm(name: str, params: dict):
    cls = algorithm_class(name)
    unknown = sorted(set(params) - set(settings_of(cls)))
    if unknown:
        raise ValueError(
            f"bad settings for algorithm {name!r}: unknown option(s) {unknown}; "
            f"allowed: {settings_of(cls) or 'none'}"
        )
    return cls(**params)
