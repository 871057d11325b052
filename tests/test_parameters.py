"""Every public parameter is checked at build / fit / search time, with a message naming it.

One table of ``(target, parameter, bad value, expected message)``; a coverage
test makes sure every keyword of every public constructor, ``search`` and the
data set generators appears in it at least once. Also: the index owns its
data (changing ``X`` after ``build`` changes nothing).
"""

from __future__ import annotations

import inspect
from contextlib import nullcontext

import numpy as np
import pytest

import hypann
from hypann._validation import ParameterTypeError
from hypann.datasets import combinatorial, registry, synthetic
from hypann.geometry._kernels import conformal_factor
from hypann.graph.vamana import VamanaIndex
from hypann.oracles.brute import BruteForceOracle
from hypann.oracles.kdtree import KDTreeOracle
from hypann.oracles.lsh import LSHOracle
from hypann.search.hyperbolic_kdtree import HyperbolicKDTree, HyperbolicKDTreeOracle
from hypann.search.registry import algorithm_class
from hypann.sklearn import HyperbolicNearestNeighbors
from tests.conftest import ball_points

NAN, INF = float("nan"), float("inf")


def _points():
    return ball_points(np.random.default_rng(3), 60, 3, min_conformal=1e-6)


def _faiss(**kw):
    pytest.importorskip("faiss")
    from hypann.oracles.faiss import FaissOracle

    return FaissOracle(**kw)


def _hnswlib(**kw):
    pytest.importorskip("hnswlib")
    from hypann.oracles.hnswlib import HnswlibOracle

    return HnswlibOracle(**kw)


def _tree():
    return synthetic.random_tree_parents(30, seed=1)


# target -> function(param, value) running the call that must raise
TARGETS = {
    # recentering: an algorithm that takes every index setting, the oracle included
    "index": lambda p, v: hypann.HyperbolicIndex(**{"algorithm": "recentering", p: v}).build(_points()),
    "search": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering").build(_points()).search(_points()[:2], **{"k": 1, p: v}),
    "search:binary_search": lambda p, v: hypann.HyperbolicIndex(algorithm="binary_search").build(_points()).search(
        _points()[:2], 1, **{p: v}),
    "search:vamana": lambda p, v: hypann.HyperbolicIndex(algorithm="vamana", random_state=0).build(_points()).search(
        _points()[:2], 1, **{p: v}),
    "search:random_shells": lambda p, v: hypann.HyperbolicIndex(algorithm="random_shells").build(_points()).search(
        _points()[:2], 1, **{p: v}),
    **{
        f"algorithm:{name}": (lambda name: lambda p, v: hypann.HyperbolicIndex(algorithm=name, **{p: v}).build(
            _points()))(name)
        for name in ("recentering", "binary_search", "shells", "random_shells", "hkdtree", "vamana", "brute", "graph", "auto")
    },
    "oracle:brute": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=f"brute:{p}={v}").build(_points()),
    "oracle:kdtree": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=KDTreeOracle(**{p: v})).build(_points()),
    "oracle:hkdtree": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=HyperbolicKDTreeOracle(**{p: v})).build(_points()),
    "oracle:lsh": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=LSHOracle(**{p: v})).build(_points()),
    "oracle:faiss": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=_faiss(**{p: v})).build(_points()),
    "oracle:hnswlib": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=_hnswlib(**{p: v})).build(_points()),
    "spec:lsh": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=f"lsh:{p}={v}").build(_points()),
    "spec:kdtree": lambda p, v: hypann.HyperbolicIndex(algorithm="recentering", oracle=f"kdtree:{p}={v}").build(_points()),
    "VamanaIndex": lambda p, v: VamanaIndex(**{p: v}).build(_points(), conformal_factor(_points())),
    "VamanaIndex.search": lambda p, v: VamanaIndex().build(_points(), conformal_factor(_points())).search(
        **{"queries": _points()[:2], "q_conformal": conformal_factor(_points()[:2]), "k": 1, p: v}),
    "HyperbolicKDTree": lambda p, v: HyperbolicKDTree(**{p: v}).build(_points(), conformal_factor(_points())),
    "sklearn": lambda p, v: HyperbolicNearestNeighbors(**{p: v}).fit(_points()),
    "sklearn.kneighbors": lambda p, v: HyperbolicNearestNeighbors(n_neighbors=2).fit(_points()).kneighbors(
        **{"X": _points()[:2], p: v}),
    "hierarchical_tree": lambda p, v: synthetic.hierarchical_tree(**{"n": 50, "dim": 3, p: v}),
    "clustered": lambda p, v: synthetic.clustered(**{"n": 50, "dim": 3, "n_clusters": 3, p: v}),
    "random_tree_parents": lambda p, v: synthetic.random_tree_parents(**{"n": 30, p: v}),
    "embed_tree": lambda p, v: synthetic.embed_tree(**{"parents": _tree(), "dim": 3, p: v}),
    "combinatorial_embedding": lambda p, v: combinatorial.combinatorial_embedding(**{"parents": _tree(), "dim": 3, p: v}),
    "spread_directions": lambda p, v: combinatorial.spread_directions(**{"m": 7, "dim": 3, p: v}),
    "sarkar_tau": lambda p, v: combinatorial.sarkar_tau(**{"epsilon": 0.1, "min_angle": 1.0, p: v}),
    "tree_distortion": lambda p, v: combinatorial.tree_distortion(
        **{"points": combinatorial.combinatorial_embedding(_tree(), 3), "parents": _tree(), "n_pairs": 10, p: v}),
    "datasets.load": lambda p, v: registry.load(**{"name": "synthetic-tree-10d", p: v}),
}

CASES = [
    # ---- HyperbolicIndex constructor (checked by build)
    ("index", "algorithm", 3, r"algorithm must be a string, one of \['auto', 'binary_search', .*\], got algorithm=3"),
    ("index", "algorithm", "nope", r"unknown algorithm 'nope'; expected one of \['auto', 'binary_search'"),
    ("index", "oracle", 3, r"oracle must be a spec string or an EuclideanOracle, got int \(3\)"),
    ("index", "oracle", "nope", r"unknown oracle 'nope'; expected one of \['brute'"),
    ("index", "model", "klein", r"model must be one of \('poincare', 'lorentz'\), got model='klein'"),
    ("index", "model", None, r"model must be one of \('poincare', 'lorentz'\), got model=None"),
    ("index", "c", 0.0, r"curvature c must be a finite number > 0, got c=0.0"),
    ("index", "c", NAN, r"curvature c must be a finite number > 0, got c=nan"),
    ("index", "c", INF, r"curvature c must be a finite number > 0, got c=inf"),
    ("index", "c", "2", r"curvature c must be a finite number > 0, got c='2'"),
    ("index", "c", 10 ** 400, r"curvature c must be a finite number > 0, got c=1000000000"),
    ("index", "c", True, r"curvature c must be a finite number > 0, got c=True"),
    ("index", "random_state", -1, r"random_state must be a non-negative integer or None, got random_state=-1$"),
    ("index", "random_state", 1.5, r"random_state must be a non-negative integer or None, got random_state=1.5 \(float\)"),
    ("index", "random_state", "7", r"random_state must be a non-negative integer or None, got random_state='7' \(str\)"),
    ("index", "n_jobs", 0, r"n_jobs must be a positive integer, -1 or None \(all cores\), got n_jobs=0"),
    ("index", "n_jobs", 1.5, r"n_jobs must be a positive integer, -1 or None \(all cores\), got n_jobs=1.5"),
    ("index", "verbose", "no", r"verbose must be True or False, got verbose='no' \(a string is not a boolean"),
    ("index", "verbose", 1, r"verbose must be True or False, got verbose=1$"),
    ("index", "bogus", 1, r"bad settings for algorithm 'recentering': .*'bogus'"),
    ("index", "storage", "float16", r"storage must be one of \('float64', 'float32'\), got storage='float16'$"),
    ("index", "storage", 32, r"storage must be one of \('float64', 'float32'\), got storage=32 \(int\)"),
    ("index", "storage", "float32", r"storage='float32' is supported by the algorithms 'auto', 'hkdtree', 'brute', 'graph' "
                                    r"\(exact for the stored points; the graph with exact=True\), got algorithm='recentering'"),
    # ---- search
    ("search", "k", 2.0, r"k must be an integer, got float \(2.0\)"),
    ("search", "k", 0, r"k must be in \[1, 60\] \(the number of indexed points\), got k=0"),
    ("search", "k", True, r"k must be an integer, got bool \(True\)"),
    ("search", "budget", 0, r"budget must be a positive integer or None, got budget=0$"),
    ("search", "budget", -5, r"budget must be a positive integer or None, got budget=-5$"),
    ("search", "budget", 10.0, r"budget must be a positive integer or None, got budget=10.0 \(float\)"),
    ("search", "budget", INF, r"budget must be a positive integer or None, got budget=inf \(float\)"),
    ("search", "budget", True, r"budget must be a positive integer or None, got budget=True \(bool\)"),
    ("search", "oracle_params", [("ef", 2)], r"oracle_params must be a dict or None, got list \(\[\('ef', 2\)\]\)"),
    ("search", "oracle_params", {"ef": 2}, r"unknown option\(s\) \['ef'\] for oracle 'kdtree'"),
    ("search", "ef", 3, r"unknown option\(s\) \['ef'\] for search with algorithm 'recentering'; allowed: none"),
    ("search:binary_search", "ratio", 1.0, r"ratio must be > 1.0, got ratio=1.0$"),
    ("search:binary_search", "ratio", 0.5, r"ratio must be > 1.0, got ratio=0.5$"),
    ("search:binary_search", "ratio", NAN, r"ratio must be a finite number, got ratio=nan$"),
    ("search:binary_search", "ratio", "2", r"ratio must be a finite number, got ratio='2' \(str\)"),
    ("search:vamana", "ef", 0, r"ef must be a positive integer or None, got ef=0$"),
    ("search:vamana", "ef", 2.5, r"ef must be a positive integer or None, got ef=2.5 \(float\)"),
    ("search:vamana", "L", 0, r"ef must be a positive integer or None, got ef=0$"),  # deprecated alias of ef
    ("search:vamana", "random_state", -1, r"random_state must be a non-negative integer or None, got random_state=-1"),
    ("search:random_shells", "random_state", "x", r"random_state must be a non-negative integer or None, got random_state='x'"),
    # ---- algorithms (build settings)
    ("algorithm:recentering", "two_phase", "no", r"two_phase must be True or False, got two_phase='no' \(a string is not a boolean"),
    ("algorithm:recentering", "two_phase", 1, r"two_phase must be True or False, got two_phase=1$"),
    ("algorithm:binary_search", "ratio", 1.0, r"ratio must be > 1.0, got ratio=1.0$"),
    ("algorithm:binary_search", "ratio", INF, r"ratio must be a finite number, got ratio=inf$"),
    ("algorithm:binary_search", "ratio", "1.5", r"ratio must be a finite number, got ratio='1.5' \(str\)"),
    ("algorithm:binary_search", "two_phase", True, r"bad settings for algorithm 'binary_search': .*'two_phase'"),
    ("algorithm:shells", "width", 1.0, r"width must be > 1.0, got width=1.0$"),
    ("algorithm:shells", "width", NAN, r"width must be a finite number, got width=nan$"),
    ("algorithm:shells", "n_shells", 0, r"n_shells must be a positive integer or None, got n_shells=0$"),
    ("algorithm:shells", "n_shells", 25.0, r"n_shells must be a positive integer or None, got n_shells=25.0 \(float\)"),
    ("algorithm:shells", "eps", -0.1, r"eps must be >= 0.0, got eps=-0.1$"),
    ("algorithm:shells", "eps", INF, r"eps must be a finite number, got eps=inf$"),
    ("algorithm:shells", "recenter", "yes", r"recenter must be True or False, got recenter='yes' \(a string is not"),
    ("algorithm:random_shells", "width", 0.5, r"width must be > 1.0, got width=0.5$"),
    ("algorithm:random_shells", "n_shells", -1, r"n_shells must be a positive integer or None, got n_shells=-1$"),
    ("algorithm:random_shells", "eps", "0", r"eps must be a finite number, got eps='0' \(str\)"),
    ("algorithm:random_shells", "recenter", "no", r"recenter must be True or False, got recenter='no'"),
    ("algorithm:hkdtree", "leaf_size", 0, r"leaf_size must be a positive integer or None, got leaf_size=0$"),
    ("algorithm:hkdtree", "leaf_size", 16.0,
     r"leaf_size must be a positive integer or None, got leaf_size=16.0 \(float\)"),
    ("algorithm:vamana", "R", 0, r"R must be a positive integer, got R=0$"),
    ("algorithm:vamana", "R", 10.0, r"R must be a positive integer, got R=10.0 \(float\)"),
    ("algorithm:vamana", "L", -1, r"L must be a positive integer, got L=-1$"),
    ("algorithm:vamana", "alpha", 0.9, r"alpha must be >= 1.0, got alpha=0.9$"),
    ("algorithm:vamana", "alpha", NAN, r"alpha must be a finite number, got alpha=nan$"),
    ("algorithm:vamana", "passes", 1.5, r"passes must be a positive integer, got passes=1.5 \(float\)"),
    ("algorithm:graph", "n_neighbors", 0, r"n_neighbors must be a positive integer, got n_neighbors=0$"),
    ("algorithm:graph", "max_degree", 8, r"max_degree must be >= n_neighbors \(24\), got max_degree=8$"),
    ("algorithm:graph", "ef", 2.5, r"ef must be a positive integer or None, got ef=2.5 \(float\)"),
    ("algorithm:graph", "target_recall", 1.5, r"target_recall must be <= 1.0, got target_recall=1.5$"),
    ("algorithm:graph", "leaf_size", 0, r"leaf_size must be a positive integer, got leaf_size=0$"),
    ("algorithm:graph", "n_trees", -1, r"n_trees must be a positive integer, got n_trees=-1$"),
    ("algorithm:graph", "max_rounds", "3", r"max_rounds must be a positive integer, got max_rounds='3' \(str\)"),
    ("algorithm:graph", "prune", "sometimes",
     r"prune must be one of \('auto', 'always', 'never'\), got prune='sometimes'$"),
    ("algorithm:graph", "prune", True, r"prune must be one of \('auto', 'always', 'never'\), got prune=True"),
    ("algorithm:graph", "exact", "yes", r"exact must be True or False, got exact='yes' \(a string is not a boolean"),
    ("algorithm:graph", "exact", 1, r"exact must be True or False, got exact=1$"),
    ("algorithm:graph", "tree_leaf_size", 0,
     r"tree_leaf_size must be a positive integer or None, got tree_leaf_size=0$"),
    ("algorithm:auto", "leaf_size", 0, r"leaf_size must be a positive integer or None, got leaf_size=0$"),
    ("algorithm:auto", "sample_size", 2.0, r"sample_size must be a positive integer, got sample_size=2.0 \(float\)"),
    ("algorithm:auto", "scan_fraction", 0.0, r"scan_fraction must be > 0.0, got scan_fraction=0.0$"),
    ("algorithm:auto", "scan_fraction", 1.5, r"scan_fraction must be <= 1.0, got scan_fraction=1.5$"),
    ("algorithm:auto", "scan_fraction", "0.1", r"scan_fraction must be a finite number, got scan_fraction='0.1' \(str\)"),
    ("algorithm:brute", "leaf_size", 8, r"bad settings for algorithm 'brute': .*'leaf_size'"),
    # ---- oracles
    ("oracle:brute", "leaf_size", 8, r"bad settings for oracle 'brute' in spec 'brute:leaf_size=8'"),
    ("oracle:brute", "random_state", -1, r"random_state must be a non-negative integer, got random_state=-1$"),
    ("oracle:kdtree", "leaf_size", 0, r"leaf_size must be a positive integer, got leaf_size=0$"),
    ("oracle:kdtree", "leaf_size", 8.0, r"leaf_size must be a positive integer, got leaf_size=8.0 \(float\)"),
    ("oracle:kdtree", "workers", 0, r"workers must be an integer >= 1 or -1, got workers=0$"),
    ("oracle:kdtree", "workers", 2.5, r"workers must be an integer >= 1 or -1, got workers=2.5 \(float\)"),
    ("oracle:hkdtree", "leaf_size", -2, r"leaf_size must be a positive integer, got leaf_size=-2$"),
    ("oracle:lsh", "tables", 0, r"tables must be a positive integer or 'auto', got tables=0$"),
    ("oracle:lsh", "tables", "many", r"tables must be a positive integer or 'auto', got tables='many'$"),
    ("oracle:lsh", "target_recall", 1.0, r"target_recall must be < 1.0, got target_recall=1.0$"),
    ("oracle:lsh", "target_recall", 0.0, r"target_recall must be > 0.0, got target_recall=0.0$"),
    ("oracle:lsh", "sample_size", 0, r"sample_size must be a positive integer, got sample_size=0$"),
    ("oracle:lsh", "bits", 2.5, r"bits must be a positive integer or 'auto', got bits=2.5 \(float\)"),
    ("oracle:lsh", "granularity", -1.0, r"granularity must be > 0.0, got granularity=-1.0$"),
    ("oracle:lsh", "granularity", NAN, r"granularity must be a finite number, got granularity=nan$"),
    ("oracle:lsh", "granularity", 1e20, r"granularity must be <= 4503599627370496.0, got granularity=1e\+20$"),
    ("oracle:lsh", "granularity", "fine", r"granularity must be a number > 0, 'data' or 'auto', got granularity='fine'"),
    ("oracle:lsh", "granularity", "auto", r"granularity='auto' is resolved per shell: call for_shell"),
    ("oracle:lsh", "probe", 2, r"probe must be 0 or 1, got probe=2$"),
    ("oracle:lsh", "probe", 1.0, r"probe must be 0 or 1, got probe=1.0 \(float\)"),
    ("oracle:lsh", "probe", True, r"probe must be 0 or 1, got probe=True \(bool\)"),
    ("oracle:lsh", "max_candidates", 0, r"max_candidates must be a positive integer or None, got max_candidates=0$"),
    ("oracle:lsh", "offset", "no", r"offset must be True or False, got offset='no' \(a string is not a boolean"),
    ("oracle:lsh", "offset", 0, r"offset must be True or False, got offset=0$"),
    ("oracle:lsh", "random_state", None, r"random_state must be a non-negative integer, got random_state=None \(NoneType\)"),
    ("oracle:lsh", "random_state", -3, r"random_state must be a non-negative integer, got random_state=-3$"),
    ("oracle:lsh", "max_granularity", 0.0, r"max_granularity must be > 0.0, got max_granularity=0.0$"),
    ("oracle:lsh", "max_granularity", INF, r"max_granularity must be a finite number, got max_granularity=inf$"),
    ("spec:lsh", "offset", "no", r"offset must be True or False, got offset='no' \(a string is not a boolean"),
    ("spec:lsh", "offset", "yes", r"offset must be True or False, got offset='yes'"),
    ("spec:lsh", "offset", "1", r"offset must be True or False, got offset=1$"),
    ("spec:lsh", "tabels", 5, r"bad settings for oracle 'lsh' in spec 'lsh:tabels=5'.*'tabels'"),
    ("spec:kdtree", "leaf_size", "8.0", r"leaf_size must be a positive integer, got leaf_size=8.0 \(float\)"),
    ("spec:kdtree", "leaf_size", "nan", r"leaf_size must be a positive integer, got leaf_size=nan \(float\)"),
    ("oracle:faiss", "factory", 3, r"factory must be a faiss factory string such as \"HNSW32\" or \"IVF256,Flat\", got factory=3"),
    ("oracle:faiss", "factory", " ", r"factory must be a faiss factory string .*, got factory=' '"),
    ("oracle:faiss", "nprobe", 0, r"nprobe must be a positive integer or None, got nprobe=0$"),
    ("oracle:faiss", "ef", 2.5, r"ef must be a positive integer or None, got ef=2.5 \(float\)"),
    ("oracle:faiss", "ef_search", 2.5, r"ef must be a positive integer or None, got ef=2.5 \(float\)"),
    ("oracle:hnswlib", "M", 1, r"M must be an integer >= 2, got M=1$"),
    ("oracle:hnswlib", "M", 16.0, r"M must be an integer >= 2, got M=16.0 \(float\)"),
    ("oracle:hnswlib", "ef_construction", 0, r"ef_construction must be a positive integer, got ef_construction=0$"),
    ("oracle:hnswlib", "ef", -1, r"ef must be a positive integer, got ef=-1$"),
    ("oracle:hnswlib", "random_state", -1, r"random_state must be a non-negative integer, got random_state=-1$"),
    ("oracle:hnswlib", "num_threads", 0, r"num_threads must be an integer >= 1 or -1, got num_threads=0$"),
    ("oracle:hnswlib", "num_threads", 1.5, r"num_threads must be an integer >= 1 or -1, got num_threads=1.5 \(float\)"),
    # ---- the graph and tree classes used directly
    ("VamanaIndex", "R", 2.0, r"R must be a positive integer, got R=2.0 \(float\)"),
    ("VamanaIndex", "L", 0, r"L must be a positive integer, got L=0$"),
    ("VamanaIndex", "alpha", 0.5, r"alpha must be >= 1.0, got alpha=0.5$"),
    ("VamanaIndex", "passes", -1, r"passes must be a positive integer, got passes=-1$"),
    ("VamanaIndex", "random_state", -1, r"random_state must be a non-negative integer, got random_state=-1$"),
    ("VamanaIndex", "random_state", None, r"random_state must be a non-negative integer, got random_state=None"),
    ("VamanaIndex.search", "k", 0, r"k must be a positive integer, got k=0$"),
    ("VamanaIndex.search", "ef", 1.5, r"ef must be a positive integer, got ef=1.5 \(float\)"),
    ("VamanaIndex.search", "L", 0, r"L must be a positive integer, got L=0$"),  # deprecated alias of ef
    ("VamanaIndex.search", "budget", 2.5, r"budget must be None, an integer or an integer array of shape \(2,\)"),
    ("VamanaIndex.search", "random_state", "x", r"random_state must be a non-negative integer, got random_state='x'"),
    ("VamanaIndex.search", "queries", np.zeros((2, 5)), r"queries must have shape \(m, 3\), got \(2, 5\)"),
    ("VamanaIndex.search", "q_conformal", np.ones(3), r"q_conformal must have shape \(2,\), got \(3,\)"),
    ("HyperbolicKDTree", "leaf_size", 0, r"leaf_size must be a positive integer, got leaf_size=0$"),
    # ---- scikit-learn estimator
    ("sklearn", "radius", -1.0, r"radius must be >= 0.0, got radius=-1.0"),
    ("sklearn", "n_neighbors", 0, r"n_neighbors must be a positive integer, got n_neighbors=0$"),
    ("sklearn", "n_neighbors", 2.5, r"n_neighbors must be a positive integer, got n_neighbors=2.5 \(float\)"),
    ("sklearn", "algorithm", "nope", r"unknown algorithm 'nope'"),
    ("sklearn", "oracle", 3, r"oracle must be a spec string or an EuclideanOracle, got int \(3\)"),
    ("sklearn", "model", "klein", r"model must be one of \('poincare', 'lorentz'\), got model='klein'"),
    ("sklearn", "c", -1, r"curvature c must be a finite number > 0, got c=-1"),
    ("sklearn", "algorithm_params", [("width", 2)], r"algorithm_params must be a dict or None, got list"),
    ("sklearn", "algorithm_params", {1: 2}, r"algorithm_params keys must be strings, got \[1\]"),
    ("sklearn", "algorithm_params", {"width": 2}, r"bad settings for algorithm 'auto': .*'width'"),
    ("sklearn", "random_state", -1, r"random_state must be a non-negative integer or None, got random_state=-1"),
    ("sklearn", "n_jobs", 0, r"n_jobs must be a positive integer, -1 or None \(all cores\), got n_jobs=0"),
    ("sklearn.kneighbors", "n_neighbors", 2.5, r"n_neighbors must be an integer, got float \(2.5\)"),
    ("sklearn.kneighbors", "n_neighbors", 0, r"n_neighbors must be in \[1, 60\]"),
    ("sklearn.kneighbors", "return_distance", "no", r"return_distance must be True or False, got return_distance='no'"),
    ("sklearn.kneighbors", "X", np.zeros((2, 4)), r"X has 4 features, but HyperbolicNearestNeighbors is expecting 3"),
    # ---- data set generators
    ("hierarchical_tree", "n", 0, r"n must be a positive integer, got n=0$"),
    ("hierarchical_tree", "dim", 1, r"dim must be >= 2 for a hyperbolic data set, got dim=1"),
    ("hierarchical_tree", "seed", -1, r"seed must be a non-negative integer, got seed=-1$"),
    ("hierarchical_tree", "branching", (0, 2), r"branching must satisfy 1 <= low <= high, got branching=\(0, 2\)"),
    ("hierarchical_tree", "edge_length", 0.0, r"edge_length must be > 0.0, got edge_length=0.0"),
    ("hierarchical_tree", "edge_noise", 1.0, r"edge_noise must be <= 0.999, got edge_noise=1.0"),
    ("hierarchical_tree", "outward", (-2.0, 1.0), r"outward must satisfy -1.0 <= low <= high, got outward=\(-2.0, 1.0\)"),
    ("hierarchical_tree", "jitter", -0.1, r"jitter must be >= 0.0, got jitter=-0.1"),
    ("clustered", "n", 2.5, r"n must be a positive integer, got n=2.5 \(float\)"),
    ("clustered", "dim", 1.5, r"dim must be a positive integer, got dim=1.5 \(float\)"),
    ("clustered", "seed", "a", r"seed must be a non-negative integer, got seed='a' \(str\)"),
    ("clustered", "n_clusters", 0, r"n_clusters must be a positive integer, got n_clusters=0"),
    ("clustered", "spread", 0.0, r"spread must be > 0.0, got spread=0.0"),
    ("clustered", "center_norm", (5.0, 1.0), r"center_norm must satisfy 0.0 <= low <= high, got center_norm=\(5.0, 1.0\)"),
    ("random_tree_parents", "n", -1, r"n must be a positive integer, got n=-1"),
    ("random_tree_parents", "branching", (2,), r"branching must be a pair \(low, high\), got branching=\(2,\)"),
    ("random_tree_parents", "seed", 1.5, r"seed must be a non-negative integer, got seed=1.5 \(float\)"),
    ("embed_tree", "parents", [[0, 1]], r"parents must be a 1-D integer array, got shape \(1, 2\)"),
    ("embed_tree", "dim", 0, r"dim must be a positive integer, got dim=0"),
    ("embed_tree", "edge_length", NAN, r"edge_length must be a finite number, got edge_length=nan"),
    ("embed_tree", "edge_noise", -0.5, r"edge_noise must be >= 0.0, got edge_noise=-0.5"),
    ("embed_tree", "outward", (0.0, 2.0), r"outward must lie in \[-1, 1\], got outward=\(0.0, 2.0\)"),
    ("embed_tree", "jitter", "small", r"jitter must be a finite number, got jitter='small' \(str\)"),
    ("embed_tree", "seed", None, r"seed must be a non-negative integer, got seed=None \(NoneType\)"),
    ("combinatorial_embedding", "parents", [0, 0], r"exactly one root"),
    ("combinatorial_embedding", "dim", 1, r"dim must be >= 2, got dim=1"),
    ("combinatorial_embedding", "tau", 0.0, r"tau must be > 0.0, got tau=0.0"),
    ("combinatorial_embedding", "epsilon", -1.0, r"epsilon must be > 0.0, got epsilon=-1.0"),
    ("combinatorial_embedding", "max_norm", NAN, r"max_norm must be a finite number, got max_norm=nan"),
    ("combinatorial_embedding", "sibling_angle", 200.0, r"sibling_angle must be <= 180.0, got sibling_angle=200.0"),
    ("combinatorial_embedding", "seed", -1, r"seed must be a non-negative integer, got seed=-1"),
    ("spread_directions", "m", 0, r"m must be a positive integer, got m=0"),
    ("spread_directions", "dim", 1, r"dim must be >= 2, got dim=1"),
    ("spread_directions", "seed", 2.0, r"seed must be a non-negative integer, got seed=2.0 \(float\)"),
    ("sarkar_tau", "epsilon", 0.0, r"epsilon must be > 0.0, got epsilon=0.0"),
    ("sarkar_tau", "min_angle", 4.0, r"min_angle must be <= 3.14159.*, got min_angle=4.0"),
    ("tree_distortion", "points", np.zeros((3, 3)), r"points must have shape \(30, d\), got \(3, 3\)"),
    ("tree_distortion", "parents", np.r_[-1, -1, _tree()[2:]], r"exactly one root"),
    ("tree_distortion", "tau", -1.0, r"tau must be > 0.0, got tau=-1.0"),
    ("tree_distortion", "n_pairs", 0, r"n_pairs must be a positive integer, got n_pairs=0"),
    ("tree_distortion", "seed", "x", r"seed must be a non-negative integer, got seed='x' \(str\)"),
    ("datasets.load", "name", "nope", r"unknown data set 'nope'; available: synthetic-tree-10d"),
    ("datasets.load", "n_queries", 0, r"n_queries must be a positive integer, got n_queries=0"),
    ("datasets.load", "k", 2.0, r"k must be a positive integer, got k=2.0 \(float\)"),
    ("datasets.load", "seed", -1, r"seed must be a non-negative integer, got seed=-1"),
    ("datasets.load", "cache", "no", r"cache must be True or False, got cache='no'"),
    ("datasets.load", "verbose", 1, r"verbose must be True or False, got verbose=1"),
]


@pytest.mark.parametrize("target, param, value, match", CASES, ids=[f"{t}-{p}-{v!r}" for t, p, v, _ in CASES])
def test_bad_parameter_is_refused_with_its_name(target, param, value, match):
    deprecated = (target, param) in DEPRECATED
    warns = pytest.warns(DeprecationWarning, match=rf"{param} is deprecated .*; use ef") if deprecated else nullcontext()
    with warns, pytest.raises((ValueError, TypeError), match=match):
        TARGETS[target](param, value)


# renamed settings: the old name still works, with a DeprecationWarning
DEPRECATED = {("search:vamana", "L"), ("oracle:faiss", "ef_search"), ("VamanaIndex.search", "L")}


# Public keywords that need no bad-value row: the data themselves (checked by
# test_validation.py) or a keyword with no invalid value.
NOT_A_SETTING = {"X", "Q", "self", "y", "params", "query_params"}


def _keywords(fn):
    return {
        name for name, p in inspect.signature(fn).parameters.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    } - NOT_A_SETTING


def _faiss_class():
    pytest.importorskip("faiss")
    from hypann.oracles.faiss import FaissOracle

    return FaissOracle


def _hnswlib_class():
    pytest.importorskip("hnswlib")
    from hypann.oracles.hnswlib import HnswlibOracle

    return HnswlibOracle


PUBLIC = {
    "index": lambda: hypann.HyperbolicIndex.__init__,
    "search": lambda: hypann.HyperbolicIndex.search,
    **{f"algorithm:{n}": (lambda n: lambda: algorithm_class(n).__init__)(n)
       for n in ("recentering", "binary_search", "shells", "random_shells", "hkdtree", "vamana", "graph", "auto")},
    "search:binary_search": lambda: algorithm_class("binary_search").query_params,
    "search:vamana": lambda: algorithm_class("vamana").query_params,
    "search:random_shells": lambda: algorithm_class("random_shells").query_params,
    "oracle:brute": lambda: BruteForceOracle.__init__,
    "oracle:kdtree": lambda: KDTreeOracle.__init__,
    "oracle:hkdtree": lambda: HyperbolicKDTreeOracle.__init__,
    "oracle:lsh": lambda: LSHOracle.__init__,
    "oracle:faiss": lambda: _faiss_class().__init__,
    "oracle:hnswlib": lambda: _hnswlib_class().__init__,
    "VamanaIndex": lambda: VamanaIndex.__init__,
    "VamanaIndex.search": lambda: VamanaIndex.search,
    "HyperbolicKDTree": lambda: HyperbolicKDTree.__init__,
    "sklearn": lambda: HyperbolicNearestNeighbors.__init__,
    "sklearn.kneighbors": lambda: HyperbolicNearestNeighbors.kneighbors,
    "hierarchical_tree": lambda: synthetic.hierarchical_tree,
    "clustered": lambda: synthetic.clustered,
    "random_tree_parents": lambda: synthetic.random_tree_parents,
    "embed_tree": lambda: synthetic.embed_tree,
    "combinatorial_embedding": lambda: combinatorial.combinatorial_embedding,
    "spread_directions": lambda: combinatorial.spread_directions,
    "sarkar_tau": lambda: combinatorial.sarkar_tau,
    "tree_distortion": lambda: combinatorial.tree_distortion,
    "datasets.load": lambda: registry.load,
}


@pytest.mark.parametrize("target", sorted(PUBLIC))
def test_every_public_parameter_has_a_bad_value_row(target):
    spec = PUBLIC[target]()
    names = set(spec) if isinstance(spec, tuple) else _keywords(spec)
    covered = {p for t, p, _, _ in CASES if t == target}
    assert names, target
    assert not names - covered, f"{target}: no bad-value case for {sorted(names - covered)}"


def test_brute_oracle_has_only_a_seed_and_the_algorithm_no_settings():
    assert _keywords(BruteForceOracle.__init__) == {"random_state"}
    assert _keywords(algorithm_class("brute").__init__) == set()


def test_constructors_only_store():
    """Bad settings are accepted by constructors and refused by build / fit."""
    idx = hypann.HyperbolicIndex(algorithm="binary_search", c=-1, ratio=0.5, random_state="x")
    assert idx.get_params()["ratio"] == 0.5
    LSHOracle(tables=-1, offset="no")
    HyperbolicNearestNeighbors(n_neighbors=-1, c="x")
    with pytest.raises(ValueError, match=r"curvature c must be a finite number > 0, got c=-1"):
        idx.build(_points())


def test_wrong_type_is_both_type_and_value_error():
    with pytest.raises(TypeError, match=r"budget must be a positive integer or None, got budget=2.0 \(float\)") as info:
        hypann.HyperbolicIndex().build(_points()).search(_points()[:1], 1, budget=2.0)
    assert isinstance(info.value, ParameterTypeError) and isinstance(info.value, ValueError)


def test_binary_search_ratio_one_is_refused_before_any_round():
    """ratio <= 1 used to run MAX_ROUNDS + 1 = 10,001 rounds (the bisection never meets R <= ratio*L)."""
    idx = hypann.HyperbolicIndex(algorithm="binary_search").build(_points())
    with pytest.raises(ValueError, match=r"ratio must be > 1.0, got ratio=1$"):
        idx.search(_points()[:3], 2, ratio=1)
    res = idx.search(_points()[:3], 2, ratio=1.0001)
    assert res.stats.rounds.max() < 100


def test_spec_true_false_literals_are_booleans():
    for literal, expected in (("true", True), ("False", False)):
        idx = hypann.HyperbolicIndex(algorithm="shells", oracle=f"lsh:offset={literal}").build(_points())
        assert all(o.offset is expected for o in idx.algorithm_.oracles_ if o is not None)
    idx = hypann.HyperbolicIndex(algorithm="shells", recenter=np.bool_(True)).build(_points())
    assert idx.algorithm_.recenter


def test_cli_param_no_is_not_true(tmp_path, capsys):
    from hypann.apps.cli import main

    x = tmp_path / "x.npy"
    np.save(x, _points())
    assert main(["build", str(x), "-o", str(tmp_path / "i.hypann"), "--algorithm", "recentering", "--param", "two_phase=no"]) == 2
    assert "two_phase must be True or False, got two_phase='no'" in capsys.readouterr().err
    assert not (tmp_path / "i.hypann").exists()


# ------------------------------------------------------------------ the index owns its data
ALGORITHMS = [
    ("recentering", "kdtree"), ("recentering", "brute"), ("recentering", "hkdtree"), ("recentering", "lsh"),
    ("binary_search", "kdtree"), ("shells", "lsh:granularity=auto"), ("shells", "brute"),
    ("random_shells", "kdtree"), ("hkdtree", None), ("vamana", None), ("brute", None),
    ("recentering", "faiss:Flat"), ("shells", "hnswlib:M=8"),
]


@pytest.mark.parametrize("algorithm, oracle", ALGORITHMS)
def test_changing_x_after_build_changes_nothing(algorithm, oracle):
    if oracle and oracle.startswith(("faiss", "hnswlib")):
        pytest.importorskip(oracle.split(":")[0])
    rng = np.random.default_rng(11)
    X = ball_points(rng, 300, 4, min_conformal=1e-8)  # float64, C-contiguous: the no-copy case
    Q = ball_points(rng, 12, 4, min_conformal=1e-8)
    idx = hypann.HyperbolicIndex(algorithm=algorithm, oracle=oracle, random_state=0).build(X)
    before = idx.search(Q, 5, budget=150 if algorithm in ("vamana", "brute") else None)
    assert not np.shares_memory(idx.points_, X)
    X[:] = 0.5 * X[::-1]  # scramble the caller's array in place
    after = idx.search(Q, 5, budget=150 if algorithm in ("vamana", "brute") else None)
    np.testing.assert_array_equal(after.indices, before.indices)
    np.testing.assert_array_equal(after.distances, before.distances)


def test_oracle_used_directly_keeps_a_copy():
    rng = np.random.default_rng(12)
    X = rng.uniform(-0.5, 0.5, (200, 3))
    Q = rng.uniform(-0.5, 0.5, (5, 3))
    for oracle in (LSHOracle(granularity=4.0), BruteForceOracle(), KDTreeOracle()):
        oracle.build(X)
        before = oracle.knn(Q, 3)
        saved = X.copy()
        X[:] = X[::-1]
        after = oracle.knn(Q, 3)
        X[:] = saved
        np.testing.assert_array_equal(after.indices, before.indices)
        np.testing.assert_array_equal(after.sq_dist, before.sq_dist)
