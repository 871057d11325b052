"""Algorithm names -> classes, imported lazily (``"recentering"``, ``"shells"``, ...)."""

from __future__ import annotations

import importlib
import inspect

_ALGORITHMS = {
    "auto": "hypann.search.auto:AutoSearch",
    "brute": "hypann.search.brute:BruteForceSearch",
    "recentering": "hypann.search.recentering:RecenteringSearch",
    "binary_search": "hypann.search.binary_search:BinarySearchSearch",
    "shells": "hypann.search.shells:SphericalShellSearch",
    "random_shells": "hypann.search.shells:RandomizedShellSearch",
    "hkdtree": "hypann.search.hkdtree_search:HyperbolicKDTreeSearch",
    "vamana": "hypann.graph.vamana_search:VamanaSearch",
    "graph": "hypann.graph.graph_search:GraphSearch",
}


def available_algorithms() -> list[str]:
    return sorted(_ALGORITHMS)


def algorithm_class(name: str):
    target = _ALGORITHMS.get(name)
    if target is None:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {available_algorithms()}")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def settings_of(cls) -> list[str]:
    """Names of the keyword settings ``cls.__init__`` takes (none for ``object.__init__``)."""
    if cls.__init__ is object.__init__:
        return []
    params = inspect.signature(cls.__init__).parameters.values()
    return [p.name for p in params if p.kind == p.KEYWORD_ONLY or (p.kind == p.POSITIONAL_OR_KEYWORD and p.name != "self")]


def make_algorithm(name: str, params: dict):
    cls = algorithm_class(name)
    unknown = sorted(set(params) - set(settings_of(cls)))
    if unknown:
        raise ValueError(
            f"bad settings for algorithm {name!r}: unknown option(s) {unknown}; "
            f"allowed: {settings_of(cls) or 'none'}"
        )
    return cls(**params)
