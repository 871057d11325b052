"""Data sets for hyperbolic nearest-neighbour search.

``load(name)`` returns a :class:`Dataset` (base points, withheld queries,
exact ground truth), cached on disk; ``list_datasets()`` names them. The
generators live in :mod:`hypann.datasets.synthetic` (random trees, wrapped
normal clusters), :mod:`hypann.datasets.combinatorial` (Sarkar / de Sa et al.
tree embeddings) and :mod:`hypann.datasets.wordnet` (WordNet nouns).
"""

from hypann.datasets.base import Dataset
from hypann.datasets.registry import list_datasets, load

__all__ = ["Dataset", "load", "list_datasets"]
