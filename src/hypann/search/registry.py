"""Algorithm names -> classes, imported lazily (``"recentering"``, ``"shells"``, ...)."""

from __future__ import annotations

import importlib

_ALGORITHMS = {
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


def make_algorithm(name: str, params: dict):
    cls = algorithm_class(name)
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"bad settings for algorithm {name!r}: {exc}") from None
