"""Exact hyperbolic k-nearest neighbours: :func:`exact_knn`, the ground truth of every benchmark, and
:func:`distances_of_ids`, the exact distances of a given answer.

Both defined in :mod:`hypann.search.ground_truth` (the search layer, below the data sets that
also need it); this module is their place in the evaluation namespace.
"""

from hypann.search.ground_truth import distances_of_ids, exact_knn

__all__ = ["exact_knn", "distances_of_ids"]
