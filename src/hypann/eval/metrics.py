"""Quality measures of approximate nearest-neighbour answers (recall, approximation ratios).

The functions are defined in :mod:`hypann.metrics`, in the package's bottom layer, so that
:class:`hypann.SearchResult` and the graph index's ``ef`` calibration use the same recall;
this module is their place in the evaluation namespace.
"""

from hypann.metrics import (
    DEFAULT_EPSILON,
    ApproximationRatios,
    approximation_ratios,
    id_recall,
    id_recall_per_query,
    recall,
    recall_per_query,
)

__all__ = [
    "recall",
    "recall_per_query",
    "id_recall",
    "id_recall_per_query",
    "approximation_ratios",
    "ApproximationRatios",
    "DEFAULT_EPSILON",
]
