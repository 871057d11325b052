"""What float32 storage does to the points nearest the boundary: the check that ``build`` and ``add`` run.

Rounding a coordinate to float32 moves it by up to ``2^-24 |x|``. The
conformal factor ``1-|x|^2`` is kept in float64 from the input, but the
Euclidean offset ``e`` between a point and its rounding is a hyperbolic offset
of about ``2 e / (1-|x|^2)``: harmless while ``1-|x|^2`` is well above ``1e-6``,
decisive further out, where rounding merges distinct points or reorders
neighbours (``docs/storage.md`` measures it per data family).

Whether it matters depends on how close the neighbours are, so the check
compares distances, not offsets. It takes the :data:`SAMPLE` points with the
smallest ``1-|x|^2`` (where rounding moves points furthest; fewer, down to
:data:`PROBE`, when the index's searches examine many points: see
:data:`WORK`), finds the nearest
other stored point of each in the built index, and compares that pair's
distance over the stored (rounded) points, ``d32``, with the distance of the
same two input points in float64, ``d64``::

    change = |d32 - d64| / d64        (0 when both are 0: exact duplicates stay duplicates)

Points added later are checked by ``add`` through the index
(:func:`added_changes`): the float64 originals of the points already there are
gone. A sampled point is *changed* when ``change > CHANGED_RELATIVE``; the
build (or ``add``) warns (:class:`Float32PrecisionWarning`) when more than
``WARN_FRACTION`` of the sample is changed. On the benchmark families at 20,000 points
(``benchmarks/float32_precision.py``, ``docs/storage.md``) the changes are
either at most 3.9 % at every checked point, with recall@10 of the float32
index against the float64 answers at 0.99 or more, or above 10 % at most of
them (points merged), with recall 0.27-0.86.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from hypann.geometry.poincare import delta, dist_from_delta
from hypann.result import Float32PrecisionWarning

#: How many points (those with the smallest ``1-|x|^2``) the check looks at, at most ...
SAMPLE = 256
#: ... of which it compares this many first (their searches measure what one costs) ...
PROBE = 32
#: ... and the rest only while the searches examine at most this many times ``n`` points in all, or
#: :data:`MIN_WORK` if that is more (a scan of a million points stops at the probe; a
#: kd-tree or graph search, or a scan of a small index, goes on).
WORK = 8
MIN_WORK = 1 << 22
#: A sampled point is changed when its nearest neighbour's distance changes by more than this fraction.
CHANGED_RELATIVE = 0.1
#: ``build`` warns when more than this fraction of the sampled points is changed.
WARN_FRACTION = 0.1


@dataclass(frozen=True)
class RoundingReport:
    """What rounding to float32 did to the nearest-neighbour distances of the points nearest the boundary.

    Attributes
    ----------
    sampled : int
        Points compared (the ones with the smallest ``1-|x|^2``).
    changed : int
        Of them, points whose nearest neighbour's distance changed by more
        than :data:`CHANGED_RELATIVE`.
    median_change, max_change : float
        Median and largest relative change ``|d32 - d64| / d64``.
    min_conformal : float
        The smallest ``1-|x|^2`` among the input points (unit curvature).
    added : bool
        Whether the points checked are those of an ``add`` (:func:`added_changes`) rather than the
        built ones.
    """

    sampled: int
    changed: int
    median_change: float
    max_change: float
    min_conformal: float
    added: bool = False

    @property
    def harmful(self) -> bool:
        """Whether more than :data:`WARN_FRACTION` of the sample changed (``build`` then warns)."""
        return self.changed > WARN_FRACTION * self.sampled

    def message(self) -> str:
        return (
            f"storage='float32' changes distances near the boundary: of the {self.sampled} "
            f"{'added points' if self.added else 'points'} nearest it "
            f"(1-|x|^2 down to {self.min_conformal:.1e}), {self.changed} have the distance to their nearest "
            f"neighbour changed by more than {CHANGED_RELATIVE:.0%} by the rounding to float32 (median change "
            f"{self.median_change:.1%}, largest {self.max_change:.0%}). Searches are exact for the rounded points, "
            f"not for your float64 ones: build with storage='float64' to keep them (see docs/storage.md)"
        )


def as_stored(points):
    """Float64 ``points`` as a float32 index stores them: rounded to float32, held in float64."""
    return np.asarray(points, dtype=np.float64).astype(np.float32).astype(np.float64)


def nothing_to_check(X, model, c, n_points) -> bool:
    """Whether a float32 index of ``n_points`` built from (or added to with) the input ``X`` has nothing
    to check: fewer than two points, or float32 Poincare coordinates at ``c = 1``, which float32 storage
    keeps as they are (any other input is rescaled or mapped to the unit ball, then rounded)."""
    return n_points < 2 or (np.asarray(X).dtype == np.float32 and model == "poincare" and c == 1.0)


def check(conformal, changes, *, added=False, stacklevel=2) -> RoundingReport:
    """The :class:`RoundingReport` of the check described above, over the points of ``conformal``.

    Parameters
    ----------
    conformal : ndarray of shape (n,)
        ``1-|x|^2`` of the points checked (unit curvature, row order): every indexed point, or the
        points of one ``add``.
    changes : callable
        ``changes(rows) -> (change, examined)``: the relative change of each of ``rows``
        (:func:`built_changes`, :func:`added_changes`) and the points each search examined.
    added : bool
        Whether the points are added ones (for the report's message).
    stacklevel : int
        Of the :class:`Float32PrecisionWarning` raised when the report is :attr:`~RoundingReport.harmful`
        (``warnings.warn``'s count, from this function): the user's frame.

    The first :data:`PROBE` points of the sample are checked first; the rest only while all the
    searches examine at most ``max(WORK * n, MIN_WORK)`` points (``stats.samples``).
    """
    rows = boundary_sample(conformal)
    change, examined = changes(rows[:PROBE])
    work = max(WORK * conformal.shape[0], MIN_WORK)
    affordable = int(work / max(float(np.median(examined)), 1.0))
    if affordable > PROBE < rows.shape[0]:
        change = np.concatenate([change, changes(rows[PROBE:affordable])[0]])
    report = rounding_report(change, conformal[rows].min(), added=added)
    if report.harmful:
        warnings.warn(report.message(), Float32PrecisionWarning, stacklevel=stacklevel)
    return report


def built_changes(rows_of, search, *, c=1.0):
    """``changes`` of :func:`check` for a built index: each row and its nearest other stored point, the
    distance of the pair over the stored points against the distance of the two input points.

    ``rows_of(rows) -> (x, x_conformal)``: the float64 unit-ball input points of those rows (as the
    input check gives them) and their factors; ``search(queries, q_conformal, k) -> SearchResult``:
    the index's ``k`` nearest points of validated unit-ball queries, ids being rows and distances in
    curvature ``-c``.
    """
    def changes(rows):
        x, x_conformal = rows_of(rows)
        found = search(as_stored(x), x_conformal, 2)
        neighbours, stored = _nearest_other(found, rows)
        y, y_conformal = rows_of(neighbours)
        return relative_change(stored, x, x_conformal, y, y_conformal, c=c), found.stats.samples

    return changes


def added_changes(exact, conformal, ids, search):
    """``changes`` of :func:`check` for points just added: what rounding each added point changed.

    The float64 originals of the points already indexed are gone, so the pair is compared through
    the index: the added point's nearest other point ``y`` (a search from its rounded coordinates,
    as stored) and the distances to ``y`` from the rounded and from the ``exact`` float64 point (a
    second search, of 3 points). When ``y`` is not among the exact point's 3 nearest, the
    neighbours' order changed: the change is ``inf``.

    ``exact`` (m, d), ``conformal`` (m,): the added unit-ball points and their factors; ``ids``
    (m,): their ids in the index; ``search(queries, q_conformal, k) -> SearchResult`` in ids.
    """
    def changes(rows):
        near = search(as_stored(exact[rows]), conformal[rows], 2)
        neighbours, stored = _nearest_other(near, ids[rows])
        far = search(exact[rows], conformal[rows], 3)
        hit = far.indices == neighbours[:, None]
        d64 = np.where(hit.any(axis=1), far.distances[np.arange(len(rows)), hit.argmax(axis=1)], np.nan)
        return _change(stored, d64), near.stats.samples + far.stats.samples

    return changes


def _nearest_other(found, own):
    """``(ids, distances)`` of each query's nearest point other than ``own`` (its id) in a 2-nearest
    ``found``: the second when the first is the point itself."""
    other = found.indices[:, 0] == own
    return (np.where(other, found.indices[:, 1], found.indices[:, 0]),
            np.where(other, found.distances[:, 1], found.distances[:, 0]))


def _change(stored, d64):
    """``|stored - d64| / d64``: 0 where both are 0 (duplicates stay duplicates), ``inf`` where only ``d64``
    is 0 or where it is NaN (unknown: the neighbours' order changed)."""
    stored = np.asarray(stored, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.abs(stored - d64) / d64
    change[(d64 == 0) & (stored == 0)] = 0.0
    change[(d64 == 0) & (stored != 0)] = np.inf
    change[np.isnan(d64)] = np.inf
    return change


def boundary_sample(conformal, size=SAMPLE):
    """Rows of the ``size`` smallest ``conformal`` factors (all rows when there are fewer), ascending row order."""
    conformal = np.asarray(conformal)
    if conformal.shape[0] <= size:
        return np.arange(conformal.shape[0])
    return np.sort(np.argpartition(conformal, size - 1)[:size])


def relative_change(stored_distance, x, x_conformal, y, y_conformal, *, c=1.0):
    """``|d32 - d64| / d64`` per pair: ``stored_distance`` (d32) against the float64 distance of the input points.

    ``x``, ``y`` (m, d): the unit-curvature float64 input points of each pair,
    with their factors ``1-|x|^2``; distances in curvature ``-c``. A pair at
    distance 0 in both has change 0; at 0 in float64 only, ``inf``.
    """
    return _change(stored_distance, dist_from_delta(delta(x, y, cx=x_conformal, cy=y_conformal), c=c))


def rounding_report(change, min_conformal, *, added=False) -> RoundingReport:
    """The :class:`RoundingReport` of the sample's relative changes (:func:`relative_change`)."""
    change = np.asarray(change, dtype=np.float64)
    return RoundingReport(int(change.shape[0]), int(np.count_nonzero(change > CHANGED_RELATIVE)),
                          float(np.median(change)), float(change.max()), float(min_conformal), added)
