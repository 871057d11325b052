"""Where a graph build spends its time: the phases of ``HyperbolicGraphIndex.build``, per data family.

For every (family, dim) of ``--families`` x ``--dims`` the script builds the graph index
(``HyperbolicIndex(algorithm="graph", n_jobs=--n-jobs, storage=--storage)``) on ``--n`` points of
the family (``hypann.datasets.families``, seed ``--seed``; WordNet: at most its 82,115) ``--repeats`` times, and times the build's
phases by wrapping the functions of :mod:`hypann.graph.knn_graph` that run them:

* ``entry tree`` (``_entry_tree``), ``gather`` (the points in its leaf order), ``forest`` (NN-descent's
  random-projection trees), ``nn-descent``, ``components`` and ``bridges`` (between the k-NN graph's
  components, when it has several);
* ``long edges``, split into ``long: sample scan`` (each point's nearest sample points,
  ``knn_delta_scan``) and ``long: pruning`` (``_long_rows``);
* ``search graph`` (``_search_graph``: reverse edges and the degree bound), ``pruning``
  (``relative_neighbourhood_rows``: the pruned copy ``prune="auto"`` calibrates too) and ``calibration``
  (``_leave_one_out_truth`` and ``HyperbolicGraphIndex._calibrate``: the default ``ef_`` and the evaluations
  at it, of both graphs under ``"auto"``);
* ``other``: the rest of the build (the input check, float32 rounding, mapping ids back, ...).

It also reports the calibrated ``ef_`` and whether the default search scans (``scans_``), and counts
NN-descent's rounds and the row entries its last round changed (``nn rounds``,
``last changes``; from the build's debug log: NN-descent stops when a round changes fewer than
``NN_DESCENT_TOL n K`` entries, or after ``max_rounds``).

Before the first case a build on 6,000 points of each dimension compiles the kernels (or loads them
from numba's cache), so no timed build compiles. Prints one table (median seconds of each phase and
its share of the build) and writes ``results/<--output>.json`` with every repeat's times.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/build_phases.py
    NUMBA_NUM_THREADS=1 python benchmarks/build_phases.py --n 100000 --dims 10,100 --storage float32
    NUMBA_NUM_THREADS=1 python benchmarks/build_phases.py --n 100000 --families "" --data meru_like --repeats 1

``--data`` adds the generators of ``independent_data.py`` (each in its own dimension).
"""

from __future__ import annotations

import argparse
import collections
import logging
import time

import numpy as np

import independent_data
from _common import WORDNET_POINTS, family_cases, markdown_table, write_json

#: (phase, module under hypann.graph, function): the functions whose calls make up each phase
PHASES = [
    ("entry tree", "knn_graph", "_entry_tree"),
    ("gather", "knn_graph", "_gathered"),
    ("forest", "knn_graph", "_forest"),
    ("nn-descent", "knn_graph", "nn_descent"),
    ("components", "knn_graph", "components"),
    ("bridges", "knn_graph", "_bridges"),
    ("long: sample scan", "long_edges", "knn_delta_scan"),
    ("long: pruning", "long_edges", "_long_rows"),
    ("search graph", "knn_graph", "_search_graph"),
    ("pruning", "knn_graph", "relative_neighbourhood_rows"),
    ("calibration", "knn_graph", "_leave_one_out_truth"),
    ("calibration", "knn_graph", "HyperbolicGraphIndex._calibrate"),
]


def install_timers(seconds):
    """Wrap every function of :data:`PHASES` so that its calls add their wall time to ``seconds[phase]`` (calls
    from inside another phase's function add to that phase only)."""
    import importlib

    active = []  # the phases running now: a phase's function called inside another phase counts there only
    for phase, module, name in PHASES:
        owner = importlib.import_module(f"hypann.graph.{module}")
        *path, name = name.split(".")  # a method: its class first
        for attr in path:
            owner = getattr(owner, attr)
        inner = getattr(owner, name)

        def timed(*args, _inner=inner, _phase=phase, **kwargs):
            if active:
                return _inner(*args, **kwargs)
            active.append(_phase)
            t0 = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                seconds[_phase] += time.perf_counter() - t0
                active.pop()

        setattr(owner, name, timed)


class RoundLog(logging.Handler):
    """Keeps the changes of every NN-descent round the build logs (``knn_graph.nn_descent``'s debug record)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.changes = []

    def emit(self, record):
        if record.msg.startswith("nn-descent round"):
            self.changes.append(int(record.args[1]))

    @classmethod
    def installed(cls):
        """A new log of the rounds, listening to ``hypann.graph.knn_graph``'s debug records from now on."""
        rounds = cls()
        graph_log = logging.getLogger("hypann.graph.knn_graph")
        graph_log.addHandler(rounds)
        graph_log.setLevel(logging.DEBUG)
        return rounds


def case_points(args):
    """``(name, dim, points)`` of every case: ``--n`` points of each family of ``--families`` in each of
    ``--dims`` (WordNet: at most its 82,115), then of each generator of ``independent_data.py`` in ``--data``
    (its own dimension); all from ``--seed``."""
    from hypann.datasets.families import make_family

    for family, dim in family_cases(args.families, args.dims):
        n = min(args.n, WORDNET_POINTS) if family == "wordnet_nouns" else args.n
        yield family, dim, make_family(family, n, dim, seed=args.seed)
    for name in filter(None, args.data.split(",")):
        points = independent_data.generate_split(name, args.n, 0, args.seed)[0]
        yield name, points.shape[1], points


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--families", default="hierarchical_tree,gaussian_mixture,hyperbolic_uniform,wordnet_nouns")
    ap.add_argument("--data", default="", help="comma-separated generators of independent_data.py (their own "
                                               "dimensions), after the families")
    ap.add_argument("--storage", choices=["float64", "float32"], default="float32")
    ap.add_argument("--n-jobs", type=int, default=1, help="threads of the build (run with NUMBA_NUM_THREADS >= it)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="build_phases")
    args = ap.parse_args()

    import warnings

    import hypann
    from hypann.datasets.families import make_family

    warnings.simplefilter("ignore", hypann.Float32PrecisionWarning)  # the rounding's note, not a measurement
    seconds = collections.defaultdict(float)
    install_timers(seconds)
    rounds = RoundLog.installed()
    settings = {"algorithm": "graph", "n_jobs": args.n_jobs, "storage": args.storage, "random_state": args.seed,
                "verbose": False}
    generators = list(filter(None, args.data.split(",")))
    dims = {d for _, d in family_cases(args.families, args.dims)} | set(map(independent_data.generator_dim, generators))
    for dim in sorted(dims):
        hypann.HyperbolicIndex(**settings).build(make_family("gaussian_mixture", 6000, dim, seed=args.seed + 1))

    phases = list(dict.fromkeys(phase for phase, _, _ in PHASES)) + ["other"]
    rows, cases = [], []
    for family, dim, points in case_points(args):
        runs = []
        for _ in range(args.repeats):
            seconds.clear()
            rounds.changes.clear()
            t0 = time.perf_counter()
            graph = hypann.HyperbolicIndex(**settings).build(points).algorithm_.graph_
            total = time.perf_counter() - t0
            run = {p: seconds.get(p, 0.0) for p in phases[:-1]}
            run["other"] = total - sum(run.values())
            run["total"] = total
            run["nn rounds"], run["last changes"] = len(rounds.changes), (rounds.changes or [0])[-1]
            run["ef_"], run["scans"] = int(graph.ef_), bool(graph.scans_)
            runs.append(run)
        median = {p: float(np.median([r[p] for r in runs])) for p in phases + ["total"]}
        cases.append({"family": family, "dim": dim, "n": int(points.shape[0]), "runs": runs, "median": median})
        row = {"family": family, "dim": dim, "build s": median["total"]}
        row.update({p: f"{median[p]:.2f} ({100 * median[p] / median['total']:.0f}%)" for p in phases})
        row.update({key: runs[-1][key] for key in ("nn rounds", "last changes", "ef_", "scans")})  # (seed: the same)
        rows.append(row)
        print(f"{family} {dim}-D: build {median['total']:.2f} s", flush=True)
    print(markdown_table(rows, ["family", "dim", "build s"] + phases + ["nn rounds", "last changes", "ef_", "scans"]))
    path = write_json(args.output, {"parameters": vars(args), "cases": cases})
    print("wrote", path)


if __name__ == "__main__":
    main()
