"""Proximity graphs with the Poincare distance.

:class:`HyperbolicGraphIndex` (``algorithm="graph"``) is the one to use:
a k-NN graph searched from partition-tree entry points, reliable on clustered
and boundary-heavy data. :class:`VamanaIndex` is the paper's Vamana baseline
(it collapses on clustered data; see :mod:`hypann.graph.knn_graph`).
"""

from hypann.graph.knn_graph import HyperbolicGraphIndex
from hypann.graph.vamana import GraphSearchResult, VamanaIndex

__all__ = ["HyperbolicGraphIndex", "VamanaIndex", "GraphSearchResult"]
