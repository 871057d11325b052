"""Proximity-graph baselines with the Poincare distance (Vamana / DiskANN)."""

from hypann.graph.vamana import GraphSearchResult, VamanaIndex

__all__ = ["VamanaIndex", "GraphSearchResult"]
