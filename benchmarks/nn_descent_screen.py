"""NN-descent's candidates screened by one-byte codes: the graph build with the screen and without, in one run.

From 16 coordinates on, NN-descent's rounds (``hypann.graph.knn_graph._refine``) first screen each point's
candidates by one-byte codes of the points (``hypann.geometry.screen_codes``), which prove most of them too
far to enter its row without reading their rows; after a window of candidates of which the screen kept more
than ``knn_graph.SCREEN_KEPT``, the next points read every row instead. The screen only leaves out candidates
the row would reject, so the graph is the same bit for bit: the script checks that every array of the
fitted graph (``to_arrays()``) is equal with and without it.

For every case (``--families`` x ``--dims``, and the generators of ``independent_data.py`` with
``--data``, each in its own dimension) it builds ``HyperbolicIndex(algorithm="graph", storage=--storage,
n_jobs=--n-jobs, random_state=--seed)`` ``--repeats`` times each way, the two alternating (the screen is
turned off by raising ``knn_graph.SCREEN_MIN_DIM`` above the dimension), and reports the median build
seconds and NN-descent seconds (``knn_graph.nn_descent``) of each and their ratio (without / with). The first
case of each dimension is built once more before, untimed, so that no timed build compiles.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/nn_descent_screen.py --n 100000 --dims 100 --n-jobs 1
    NUMBA_NUM_THREADS=1 python benchmarks/nn_descent_screen.py --n 100000 --families "" --data meru_like

Prints one table and writes ``results/<--output>.json``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from _common import markdown_table, write_json
from build_phases import case_points

#: The screen's setting in each build: on (the library's), off.
WAYS = ("screen", "no screen")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dims", default="100")
    ap.add_argument("--families", default="hierarchical_tree,gaussian_mixture,hyperbolic_uniform,boundary_heavy,"
                                          "duplicates,wordnet_nouns")
    ap.add_argument("--data", default="", help="comma-separated generators of independent_data.py")
    ap.add_argument("--storage", choices=["float64", "float32"], default="float32")
    ap.add_argument("--n-jobs", type=int, default=1, help="threads of the build (run with NUMBA_NUM_THREADS >= it)")
    ap.add_argument("--repeats", type=int, default=2, help="builds each way (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="nn_descent_screen")
    args = ap.parse_args()

    import hypann
    from hypann.graph import knn_graph

    warnings.simplefilter("ignore", hypann.Float32PrecisionWarning)  # the rounding's note, not a measurement
    library_min_dim = knn_graph.SCREEN_MIN_DIM
    nn_seconds = []
    inner = knn_graph.nn_descent

    def timed_nn_descent(*a, **kw):
        t0 = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            nn_seconds.append(time.perf_counter() - t0)

    knn_graph.nn_descent = timed_nn_descent
    settings = {"algorithm": "graph", "n_jobs": args.n_jobs, "storage": args.storage, "random_state": args.seed,
                "verbose": False}

    def build(points, way):
        knn_graph.SCREEN_MIN_DIM = library_min_dim if way == "screen" else np.iinfo(np.int64).max
        nn_seconds.clear()
        t0 = time.perf_counter()
        graph = hypann.HyperbolicIndex(**settings).build(points).algorithm_.graph_
        return time.perf_counter() - t0, sum(nn_seconds), graph.to_arrays()

    rows, cases = [], []
    warm = set()
    for name, dim, points in case_points(args):
        if dim not in warm:  # compiles the kernels of this dimension (or loads them); untimed
            build(points, "screen")
            warm.add(dim)
        times = {way: [] for way in WAYS}
        arrays = {}
        for _ in range(args.repeats):
            for way in WAYS:
                total, nn, arrays[way] = build(points, way)
                times[way].append((total, nn))
        same = arrays["screen"].keys() == arrays["no screen"].keys() and all(
            np.array_equal(np.asarray(arrays["screen"][key]), np.asarray(arrays["no screen"][key]))
            for key in arrays["screen"])
        if not same:
            raise AssertionError(f"{name} {dim}-D: the graph differs with the screen")
        med = {way: np.median(np.array(times[way]), axis=0) for way in WAYS}
        row = {"data": name, "dim": dim, "n": int(points.shape[0]),
               "build s, screen": med["screen"][0], "build s, no screen": med["no screen"][0],
               "build ratio": med["no screen"][0] / med["screen"][0],
               "nn-descent s, screen": med["screen"][1], "nn-descent s, no screen": med["no screen"][1],
               "nn-descent ratio": med["no screen"][1] / med["screen"][1], "same graph": same}
        rows.append(row)
        cases.append({**row, "times": times})
        print(f"{name} {dim}-D: build {row['build s, no screen']:.2f} -> {row['build s, screen']:.2f} s, "
              f"nn-descent {row['nn-descent s, no screen']:.2f} -> {row['nn-descent s, screen']:.2f} s", flush=True)
    knn_graph.SCREEN_MIN_DIM = library_min_dim
    print(markdown_table(rows, list(rows[0]) if rows else []))
    path = write_json(args.output, {"parameters": vars(args), "cases": cases})
    print("wrote", path)


if __name__ == "__main__":
    main()
