"""Euclidean nearest-neighbour oracles behind one protocol (:class:`EuclideanOracle`)."""

from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle
from hypann.oracles.brute import BruteForceOracle
from hypann.oracles.kdtree import KDTreeOracle
from hypann.oracles.lsh import LSHOracle
from hypann.oracles.registry import available_oracles, make_oracle, register_oracle

__all__ = [
    "EuclideanNeighbors",
    "EuclideanOracle",
    "BruteForceOracle",
    "KDTreeOracle",
    "LSHOracle",
    "available_oracles",
    "make_oracle",
    "register_oracle",
]
