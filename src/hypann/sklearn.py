"""A scikit-learn style estimator over :class:`hypann.HyperbolicIndex` (a thin wrapper).

Follows the ``sklearn.neighbors.NearestNeighbors`` contract: ``fit`` stores a
fitted ``index_``, ``kneighbors`` returns ``(distances, indices)``, and
``X=None`` queries the training points themselves, each excluding itself.
scikit-learn itself is not needed; when it is installed the estimator is a
``BaseEstimator`` (cloning, pipelines).
"""

from __future__ import annotations

import numpy as np

from hypann import _validation as V
from hypann.index import DEFAULT_ALGORITHM, HyperbolicIndex

try:  # optional: only for clone()/pipelines
    from sklearn.base import BaseEstimator as _Base
except ImportError:  # pragma: no cover - sklearn absent
    _Base = object


class HyperbolicNearestNeighbors(_Base):
    """Unsupervised hyperbolic nearest neighbours.

    Parameters
    ----------
    n_neighbors : int, default 5
    algorithm : str, default :data:`hypann.DEFAULT_ALGORITHM` ("hkdtree")
        Any :class:`hypann.HyperbolicIndex` algorithm.
    oracle : str, optional
        Euclidean oracle spec.
    model : {"poincare", "lorentz"}, default "poincare"
    c : float, default 1.0
        Curvature magnitude.
    algorithm_params : dict, optional
        Build settings of the algorithm (e.g. ``{"width": 3}``).
    random_state : int, optional

    Attributes
    ----------
    index_ : HyperbolicIndex
    n_samples_fit_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from hypann.sklearn import HyperbolicNearestNeighbors
    >>> X = np.array([[0.0, 0.0], [0.5, 0.0], [0.0, 0.9]])
    >>> dist, ind = HyperbolicNearestNeighbors(n_neighbors=1).fit(X).kneighbors()
    >>> ind.ravel().tolist()
    [1, 0, 0]
    """

    def __init__(self, n_neighbors=5, *, algorithm=DEFAULT_ALGORITHM, oracle=None, model="poincare", c=1.0,
                 algorithm_params=None, random_state=None):
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.oracle = oracle
        self.model = model
        self.c = c
        self.algorithm_params = algorithm_params
        self.random_state = random_state

    def fit(self, X, y=None):
        self.index_ = HyperbolicIndex(
            algorithm=self.algorithm, oracle=self.oracle, model=self.model, c=self.c,
            random_state=self.random_state, **(self.algorithm_params or {}),
        ).build(X)
        self.n_samples_fit_ = self.index_.n_points_
        return self

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Neighbours of ``X`` (or of the training points, excluding themselves, when ``X`` is None)."""
        if not hasattr(self, "index_"):
            raise ValueError("this HyperbolicNearestNeighbors is not fitted yet: call fit(X) first")
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if X is None:
            V.check_k(k, self.n_samples_fit_ - 1, name="n_neighbors")
            res = self.index_.search(self._training_input(), k + 1)
            ind, dist = _drop_self(res.indices, res.distances)
        else:
            res = self.index_.search(X, V.check_k(k, self.n_samples_fit_, name="n_neighbors"))
            ind, dist = res.indices, res.distances
        return (dist, ind) if return_distance else ind

    def _training_input(self):
        # the stored points are unit-curvature Poincare; map back to the fit's input space
        pts = self.index_.points_ / np.sqrt(self.c)
        if self.model == "lorentz":
            from hypann.geometry.models import poincare_to_lorentz

            return poincare_to_lorentz(pts, c=self.c)
        return pts


def _drop_self(ind, dist):
    """Remove each row's own index (or, for duplicates, the last column) from k+1 results."""
    m, k1 = ind.shape
    own = ind == np.arange(m)[:, None]
    # rows where self was not returned (exact duplicates): drop the last column
    own[~own.any(axis=1), k1 - 1] = True
    first = own & (np.cumsum(own, axis=1) == 1)
    keep = ~first
    return ind[keep].reshape(m, k1 - 1), dist[keep].reshape(m, k1 - 1)
