"""Evaluation helpers: exact ground truth, exact distances of an answer, quality metrics (recall, approximation
ratios)."""

from hypann import metrics as _metrics
from hypann.metrics import *  # noqa: F401,F403 - recall, approximation ratios (see hypann.metrics)
from hypann.search.ground_truth import distances_of_ids, exact_knn

__all__ = ["exact_knn", "distances_of_ids", *_metrics.__all__]
