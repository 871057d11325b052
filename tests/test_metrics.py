"""Hand-computed checks of recall and approximation-ratio metrics."""

import numpy as np
import pytest

from hypann.eval.metrics import (
    approximation_ratios,
    id_recall,
    id_recall_per_query,
    recall,
    recall_per_query,
)

TRUE_D = np.array([[1.0, 2.0, 3.0], [0.0, 0.5, 0.5]])


def test_distance_recall_hand_computed():
    found = np.array([[1.0, 2.5, 4.0], [0.0, 0.5, 0.7]])
    # query 0: threshold 3 -> 1.0, 2.5 count, 4.0 not: 2/3; query 1: threshold 0.5 -> 2/3
    np.testing.assert_allclose(recall_per_query(found, TRUE_D), [2 / 3, 2 / 3])
    assert recall(found, TRUE_D) == pytest.approx(2 / 3)
    # k = 1: only the first column, against the first true distance
    np.testing.assert_allclose(recall_per_query(found, TRUE_D, k=1), [1.0, 1.0])


def test_distance_recall_ties_and_epsilon():
    true_d = np.array([[1.0, 2.0]])
    # a different point at the same distance as the true 2nd neighbour still counts
    assert recall([[1.0, 2.0]], true_d) == 1.0
    # a relative excess of 1e-12 is inside the default slack of 1e-9, 1e-6 is not
    assert recall([[1.0, 2.0 * (1 + 1e-12)]], true_d) == 1.0
    assert recall([[1.0, 2.0 * (1 + 1e-6)]], true_d) == 0.5
    assert recall([[1.0, 2.0 * (1 + 1e-6)]], true_d, epsilon=1e-5) == 1.0


def test_distance_recall_padding_and_short_rows():
    assert recall([[1.0, np.inf]], [[1.0, 2.0]]) == 0.5
    assert recall([[1.0]], [[1.0, 2.0]]) == 0.5  # fewer than k returned


def test_id_recall_hand_computed():
    true_ids = np.array([[3, 1, 4], [1, 5, 9]])
    found = np.array([[1, 3, 7], [9, -1, 9]])
    # query 0: {1,3} of {3,1,4} -> 2/3; query 1: 9 once (repeat and padding ignored) -> 1/3
    np.testing.assert_allclose(id_recall_per_query(found, true_ids), [2 / 3, 1 / 3])
    assert id_recall(found, true_ids) == pytest.approx(0.5)
    assert id_recall(found, true_ids, k=1) == pytest.approx(0.0)


def test_approximation_ratios_hand_computed():
    found = np.array([[2.0, 1.0, 6.0], [0.0, 1.0, 0.5]])
    r = approximation_ratios(found, TRUE_D)
    # rows sorted: [1,2,6]/[1,2,3] = [1,1,2]; [0,0.5,1]/[0,0.5,0.5] = [1,1,2]
    np.testing.assert_allclose(r.ratios, [[1.0, 1.0, 2.0], [1.0, 1.0, 2.0]])
    assert r.mean_ratio == pytest.approx(8 / 6)
    assert r.mean_max_ratio == pytest.approx(2.0)


def test_approximation_ratio_zero_true_distance():
    r = approximation_ratios([[0.3], [0.0]], [[0.0], [0.0]])
    assert r.ratios[0, 0] == np.inf and r.ratios[1, 0] == 1.0
    r = approximation_ratios([[1.0, 1.5], [2.0, 3.0]], [[1.0, 1.5], [1.0, 1.5]])
    assert r.mean_ratio == pytest.approx(1.5) and r.mean_max_ratio == pytest.approx(1.5)


def test_approximation_ratio_padding_is_inf():
    r = approximation_ratios([[1.0]], [[1.0, 2.0]])
    assert r.ratios[0, 1] == np.inf and r.mean_max_ratio == np.inf


@pytest.mark.parametrize(
    "args, match",
    [
        (([[1.0]], [[1.0]], 2), "exceeds the 1 ground-truth"),
        (([[1.0]], [[1.0]], 0), "k must be a positive integer"),
        (([1.0], [[1.0]]), "2-D array"),
        (([[1.0], [2.0]], [[1.0]]), "same number of queries"),
    ],
)
def test_metric_validation(args, match):
    with pytest.raises(ValueError, match=match):
        recall(*args)
