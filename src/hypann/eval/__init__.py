"""Evaluation helpers: exact ground truth and quality metrics (recall, approximation ratios)."""

from hypann.search.ground_truth import exact_knn
from hypann.metrics import (
    ApproximationRatios,
    approximation_ratios,
    id_recall,
    id_recall_per_query,
    recall,
    recall_per_query,
)

__all__ = [
    "exact_knn",
    "recall",
    "recall_per_query",
    "id_recall",
    "id_recall_per_query",
    "approximation_ratios",
    "ApproximationRatios",
]
