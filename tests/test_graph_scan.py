"""The graph index's default search as an exact scan where its walk would cost more (``scans_``)."""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from hypann.datasets.families import make_family
from hypann.geometry._kernels import conformal_factor, delta_row
from hypann.geometry.models import poincare_to_lorentz
from hypann.geometry.poincare import dist_from_delta
from hypann.graph import HyperbolicGraphIndex, knn_graph
from tests.conftest import brute_knn_delta

pytestmark = pytest.mark.kernels  # also run under NUMBA_BOUNDSCHECK=1 (make test)

K = 10


@pytest.fixture(scope="module")
def uniform():
    """Points uniform in a hyperbolic ball, 100-D: nearest neighbours barely nearer than the rest, so the
    calibrated list evaluates most of the points."""
    X = np.ascontiguousarray(make_family("hyperbolic_uniform", 2040, 100, seed=0))
    return X[:2000], X[2000:]


@pytest.fixture(scope="module")
def uniform_graph(uniform):
    X, _ = uniform
    return HyperbolicGraphIndex(random_state=0).build(X, conformal_factor(X), keep_order=True)


def test_the_default_search_is_an_exact_scan_where_the_walk_would_cost_more(uniform, uniform_graph):
    X, Q = uniform
    g = uniform_graph
    assert g.scans_ and g.default_evaluations_ > knn_graph.SCAN_FRACTION * len(X)
    cq = conformal_factor(Q)
    true_i, true_d = brute_knn_delta(Q, cq, X, conformal_factor(X), K)
    res = g.search(Q, cq, K)
    assert np.array_equal(res.deltas, true_d) and np.array_equal(res.samples, np.full(len(Q), len(X)))
    assert np.array_equal(res.ids, true_i)  # no ties here: the same ids
    # an explicit list, or a budget, is the graph walk
    walk = g.search(Q, cq, K, ef=g.ef_)
    assert np.all(walk.samples < len(X)) and not np.array_equal(walk.deltas, true_d)
    assert np.all(g.search(Q, cq, K, budget=50).samples <= 50)
    # one query by its coordinates, also on the hyperboloid: the same scan
    one = g.search_coordinates(Q[3:4], 1.0, K)
    assert np.array_equal(one.ids, true_i[3:4]) and np.array_equal(one.deltas, true_d[3:4])
    lorentz = poincare_to_lorentz(Q[3:4])
    assert np.array_equal(g.search_coordinates(lorentz, 1.0, K, model="lorentz").ids, true_i[3:4])
    assert g.search_coordinates(Q[3:4] * 2.0, 1.0, K) is None  # not a point of the ball
    # k past the points: padded as the walk pads
    small = HyperbolicGraphIndex(random_state=0).build(X[:40], conformal_factor(X[:40]), keep_order=True)
    assert small.scans_
    wide = small.search(Q[:2], cq[:2], 45)
    assert np.all(wide.ids[:, 40:] == -1) and np.all(np.isinf(wide.deltas[:, 40:]))
    assert sorted(wide.ids[0, :40]) == list(range(40))


def test_the_calibration_stops_for_the_scan_short_of_its_target_without_a_warning(uniform, uniform_graph, caplog,
                                                                                   monkeypatch):
    """The ladder stops once its walk evaluates more than SCAN_FRACTION of the points: the default search scans,
    ``ef_`` is short of the target recall, and nothing warns (the default answer is exact). Without the stop
    (a fraction no walk reaches) the same graph climbs on to the target at a longer list."""
    X, _ = uniform
    g = uniform_graph
    assert g.scans_ and g.calibration_recall_ < g.target_recall
    with caplog.at_level("WARNING", logger="hypann.graph.knn_graph"):
        again = HyperbolicGraphIndex(random_state=0).build(X, conformal_factor(X), keep_order=True)
    assert again.ef_ == g.ef_ and "calibration" not in caplog.text
    monkeypatch.setattr(knn_graph, "SCAN_FRACTION", 1.0)
    full = HyperbolicGraphIndex(random_state=0).build(X, conformal_factor(X), keep_order=True)
    assert full.ef_ > g.ef_ and full.calibration_recall_ >= full.target_recall and not full.scans_


def test_the_rule_compares_the_measured_evaluations_with_a_fraction_of_the_points(uniform, uniform_graph):
    g = HyperbolicGraphIndex.from_arrays(uniform_graph.to_arrays())
    n = g.n_points_
    g.default_evaluations_ = knn_graph.SCAN_FRACTION * n
    assert not g.scans_
    g.default_evaluations_ = np.nextafter(knn_graph.SCAN_FRACTION * n, np.inf)
    assert g.scans_
    g.default_evaluations_ = float("nan")  # a given ef, or a file written before the measure
    assert not g.scans_
    # clustered data: the walk evaluates a small part of the points
    X = np.ascontiguousarray(make_family("gaussian_mixture", 5000, 10, seed=0))
    mixture = HyperbolicGraphIndex(random_state=0).build(X, conformal_factor(X))
    assert not mixture.scans_ and mixture.default_evaluations_ < 0.02 * len(X)
    # a given ef is not replaced
    fixed = HyperbolicGraphIndex(random_state=0, ef=64).build(*uniform_graph.points_in_input_order())
    assert np.isnan(fixed.default_evaluations_) and not fixed.scans_


def test_the_measure_is_saved_checked_and_absent_in_older_files(uniform, uniform_graph):
    X, Q = uniform
    state = uniform_graph.to_arrays()
    assert float(state["default_evaluations"]) == uniform_graph.default_evaluations_
    again = HyperbolicGraphIndex.from_arrays(state)
    cq = conformal_factor(Q)
    assert again.scans_ and np.array_equal(again.search(Q, cq, K).ids, uniform_graph.search(Q, cq, K).ids)
    older = {name: arr for name, arr in state.items() if name != "default_evaluations"}
    old = HyperbolicGraphIndex.from_arrays(older)
    assert not old.scans_ and np.all(old.search(Q, cq, K).samples < len(X))
    for bad in (np.float64(-1.0), np.float64(np.nan), np.float64(np.inf), np.int64(5), np.array([1.0, 2.0])):
        with pytest.raises(ValueError, match="default_evaluations"):
            HyperbolicGraphIndex.from_arrays({**state, "default_evaluations": bad})


@pytest.mark.parametrize("settings", [{}, {"exact": True}, {"storage": "float32"}],
                         ids=["graph", "exact", "float32"])
def test_the_index_answers_as_brute_force(uniform, settings, tmp_path):
    X, Q = uniform
    X = np.concatenate([X, X[:30]])  # exact copies: graph nodes with copies (leaf order), or kd-tree rows
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False, **settings).build(X)
    assert "scans every point exactly" in index.describe()
    brute = hypann.HyperbolicIndex(algorithm="brute", verbose=False, storage=settings.get("storage", "float64"))
    truth = brute.build(X).search(Q, K)
    res = index.search(Q, K)
    assert np.array_equal(res.distances, truth.distances)
    # every id at its own distance (ids may differ from brute force's only among exact copies)
    stored, cx, cq = index.points_, conformal_factor(X), conformal_factor(Q)
    own = [[delta_row(Q[i], cq[i], stored[j], cx[j]) for j in row] for i, row in enumerate(res.indices)]
    assert np.array_equal(dist_from_delta(np.array(own)), res.distances)
    assert all(len(set(row)) == K for row in res.indices.tolist())
    one = index.search(Q[5:6], K)
    assert np.array_equal(one.distances, res.distances[5:6]) and np.array_equal(one.indices, res.indices[5:6])
    index.save(tmp_path / "scan.hypann")
    loaded = hypann.load(tmp_path / "scan.hypann")
    assert loaded.algorithm_.graph_.scans_ and np.array_equal(loaded.search(Q, K).indices, res.indices)


def test_rows_become_ids_through_an_order_and_rows_it_cannot_map_are_dropped():
    ids = np.array([[2, 0, -1], [1, 3, 2]])
    deltas = np.array([[0.1, 0.2, np.inf], [0.3, 0.4, 0.5]])
    order = np.array([7, 5, 1, 9], dtype=np.int32)  # 7 and 9: outside the 4 rows (a damaged order)
    knn_graph.rows_to_ids(ids, deltas, order)
    assert ids.tolist() == [[1, -1, -1], [-1, -1, 1]]
    assert deltas.tolist() == [[0.1, np.inf, np.inf], [np.inf, np.inf, 0.5]]
