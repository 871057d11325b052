"""hypann: nearest-neighbour search for hyperbolic embeddings.

Implements Wu & Charikar, *Nearest Neighbor Search for Hyperbolic Embeddings*
(Recentering, Binary-Search and Spherical-Shell search on top of any Euclidean
nearest-neighbour oracle) and goes past it. Start with :class:`HyperbolicIndex`.
"""

from hypann.index import HyperbolicIndex
from hypann.io import read_metadata
from hypann.result import SearchResult, SearchStats

__version__ = "0.1.0"


def load(path, **overrides) -> HyperbolicIndex:
    """Read an index saved with :meth:`HyperbolicIndex.save`."""
    return HyperbolicIndex.load(path, **overrides)


__all__ = ["HyperbolicIndex", "SearchResult", "SearchStats", "load", "read_metadata", "__version__"]
