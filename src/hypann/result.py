"""The one result contract of hypann: :class:`SearchResult` with per-query :class:`SearchStats`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from hypann._runtime import filled
from hypann.metrics import DEFAULT_EPSILON, recall


class Float32PrecisionWarning(UserWarning):
    """``storage="float32"`` changes distances: between the points nearest the boundary (the build's check,
    :mod:`hypann.rounding`), and those an answer reports (:meth:`SearchResult.recall`)."""


# The oracle calls and the round of a one-query search (:meth:`SearchStats.one_query` copies them).
_NO_CALL = np.zeros(1, dtype=np.int64)
_ONE_ROUND = np.ones(1, dtype=np.int64)


@dataclass
class SearchStats:
    """Per-query work counters, arrays of shape (n_queries,).

    Attributes
    ----------
    oracle_calls : ndarray of int64
        Calls to the Euclidean oracle (k-NN or decision queries) per query.
    samples : ndarray of int64
        Points examined per query (the paper's "# Samples"): the oracle's own
        count when it can count (brute force, the hyperbolic kd-tree, LSH),
        otherwise the candidates handed back to hypann and re-ranked.
    rounds : ndarray of int64
        Iterations of the algorithm's main loop.
    extra : dict of str -> ndarray
        Algorithm-specific counters (e.g. ``shells_probed``).
    """

    oracle_calls: np.ndarray
    samples: np.ndarray
    rounds: np.ndarray
    extra: dict = field(default_factory=dict)

    @classmethod
    def zeros(cls, m, *extra_names):
        z = lambda: np.zeros(m, dtype=np.int64)  # noqa: E731
        return cls(z(), z(), z(), {name: z() for name in extra_names})

    @classmethod
    def without_oracle(cls, samples, rounds):
        """Counters of a search that calls no oracle: ``samples`` per query, ``rounds`` (an int) for all."""
        m = samples.shape[0]
        return cls(np.zeros(m, dtype=np.int64), samples, filled(m, rounds, np.int64))

    @classmethod
    def one_query(cls, samples):
        """Counters of a one-query search in one compiled call (:meth:`without_oracle` of ``samples`` (1,)
        and one round): each array made by one copy, which costs less than the general constructor."""
        return cls(_NO_CALL.copy(), samples, _ONE_ROUND.copy())

    def as_dict(self) -> dict:
        out = {"oracle_calls": self.oracle_calls, "samples": self.samples, "rounds": self.rounds}
        out.update(self.extra)
        return out

    def summary(self) -> dict:
        """Mean, sd, min, max of every counter (the paper's Table 1 columns)."""
        out = {}
        for name, arr in self.as_dict().items():
            a = np.asarray(arr, dtype=np.float64)
            if a.size == 0:
                continue
            out[name] = {"mean": float(a.mean()), "sd": float(a.std()), "min": float(a.min()), "max": float(a.max())}
        return out

    def put(self, rows, part) -> None:
        """Write the counters of ``part`` (a :class:`SearchStats` of ``len(rows)`` queries) into ``rows``; an
        extra counter new to ``self`` starts at zero in its other rows."""
        self.oracle_calls[rows] = part.oracle_calls
        self.samples[rows] = part.samples
        self.rounds[rows] = part.rounds
        for name, values in part.extra.items():
            if name not in self.extra:
                self.extra[name] = np.zeros(self.samples.shape[0], dtype=np.int64)
            self.extra[name][rows] = values

    def take(self, rows) -> "SearchStats":
        return SearchStats(
            self.oracle_calls[rows], self.samples[rows], self.rounds[rows], {k: v[rows] for k, v in self.extra.items()}
        )


@dataclass
class SearchResult:
    """Answer of :meth:`hypann.HyperbolicIndex.search` for a batch of queries.

    Attributes
    ----------
    indices : ndarray of shape (n_queries, k), int64
        Row ids into the indexed points, nearest first; ``-1`` where fewer than
        k were found (approximate searches under a budget).
    distances : ndarray of shape (n_queries, k), float64
        Hyperbolic distances in the index's curvature, ascending; ``inf``
        where the id is ``-1``.
    stats : SearchStats
        Per-query counters.
    float32_points : bool
        Whether the answer comes from points stored in float32 (``storage="float32"``): its distances are then
        those of the rounded points, not of the float64 points the index was given.
    """

    indices: np.ndarray
    distances: np.ndarray
    stats: SearchStats
    float32_points: bool = False

    @property
    def k(self) -> int:
        return self.indices.shape[1]

    def __len__(self):
        return self.indices.shape[0]

    def recall(self, true_distances, *, rtol: float = DEFAULT_EPSILON) -> float:
        """Mean recall@k against exact distances, counted by distance threshold.

        A returned neighbour counts when its distance is at most the true k-th
        distance times ``1 + rtol``, so equidistant points (frequent near the
        boundary) do not matter. Computed by :func:`hypann.metrics.recall`.

        The answer's own distances are used. With :attr:`float32_points` they
        are those of the rounded points, and a neighbour that was found can
        miss the threshold by the rounding: the call warns
        (:class:`Float32PrecisionWarning`). Count with the float64 distances of
        the returned points instead:
        ``recall(distances_of_ids(Q, X, res.indices), true_distances)``
        (:func:`hypann.eval.distances_of_ids`, :func:`hypann.metrics.recall`).
        """
        if self.float32_points:
            warnings.warn("these distances are those of the float32-rounded points (storage='float32'), so a "
                          "neighbour that was found can miss the recall threshold by the rounding; count with "
                          "recall(hypann.eval.distances_of_ids(Q, X, res.indices), true_distances) instead",
                          Float32PrecisionWarning, stacklevel=2)
        return recall(self.distances, true_distances, self.k, epsilon=rtol)

    def __repr__(self):
        return f"SearchResult(n_queries={len(self)}, k={self.k}, mean_oracle_calls={self.stats.oracle_calls.mean():.3g})"


@dataclass
class RangeSearchResult:
    """Answer of :meth:`hypann.HyperbolicIndex.search_radius`: a ragged batch.

    The neighbours of query ``i`` are ``indices[offsets[i]:offsets[i+1]]``,
    nearest first, with their ``distances`` (the layout of faiss's range
    search; ``result[i]`` gives the pair of slices).

    Attributes
    ----------
    offsets : ndarray of shape (n_queries + 1,), int64
    indices : ndarray of shape (offsets[-1],), int64
    distances : ndarray of shape (offsets[-1],), float64
        Hyperbolic distances in the index's curvature, ascending per query.
    float32_points : bool
        Whether the answer comes from points stored in float32 (``storage="float32"``): its points are those
        within the radius of the rounded points, at their distances (see :class:`SearchResult`).
    """

    offsets: np.ndarray
    indices: np.ndarray
    distances: np.ndarray
    float32_points: bool = False

    def __len__(self):
        return self.offsets.shape[0] - 1

    def __getitem__(self, i):
        """``(indices, distances)`` of query ``i``."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"query {i} out of range for {len(self)} queries")
        i = i % len(self)
        s, e = self.offsets[i], self.offsets[i + 1]
        return self.indices[s:e], self.distances[s:e]

    @property
    def counts(self) -> np.ndarray:
        """Number of neighbours found per query."""
        return np.diff(self.offsets)

    def __repr__(self):
        return f"RangeSearchResult(n_queries={len(self)}, total={self.indices.shape[0]})"
