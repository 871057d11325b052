"""Exact hyperbolic k-nearest neighbours: :func:`exact_knn`, the ground truth of every benchmark.

Defined in :mod:`hypann.search.ground_truth` (the search layer, below the data sets that
also need it); this module is its place in the evaluation namespace.
"""

from hypann.search.ground_truth import exact_knn

__all__ = ["exact_knn"]
