"""hypann: nearest-neighbour search for hyperbolic embeddings."""

__version__ = "0.1.0"
