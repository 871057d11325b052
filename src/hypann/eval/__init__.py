"""Evaluation helpers: exact ground truth and quality metrics (recall, approximation ratios)."""

from hypann import metrics as _metrics
from hypann.metrics import *  # noqa: F401,F403 - recall, approximation ratios (see hypann.metrics)
from hypann.search.ground_truth import exact_knn

__all__ = ["exact_knn", *_metrics.__all__]
