"""Euclidean oracle on faiss (``pip install hypann[faiss]``): Flat, IVF, HNSW, any factory string.

faiss stores and compares float32 vectors: it *chooses* the ``k`` neighbours
in float32, then this oracle recomputes their squared distances in float64
from explicit differences and re-sorts them (hypann re-ranks hyperbolically
in float64 anyway). Points closer than float32 can resolve (coordinates
within ~6e-8 relative, i.e. near the boundary of the ball) are ranked
wrongly by faiss's float32 arithmetic.

``"Flat"`` is nevertheless an exact oracle (``exact`` is True for it only):
it widens its candidate list until the float64 re-rank provably holds the
float64 k nearest. With ``F(x)`` the float32 squared distance faiss ranks
by and ``D(x)`` the float64 one, a bound ``|F(x) - D(x)| <= E(q)`` holds for
every point (:func:`float32_sq_dist_error`). If faiss returned the ``k'``
smallest ``F`` and the k-th smallest re-ranked ``D`` among them is ``D_k``,
then every point not returned has ``D(x) >= F_{k'} - E``; once

.. math:: F_{k'} - E(q) > D_k\\,(1 + \\epsilon_d)

no point outside the list can be among the ``k`` nearest. ``k'`` starts at
``2k + 10`` and is multiplied by 4 until that holds or ``k' = n``. Near the
boundary ``E ~ 1e-6`` swamps the neighbour distances and a query's whole
cluster is re-ranked: exact, at a cost.

Spec strings: ``"faiss:HNSW32"``, ``"faiss:IVF256,Flat;nprobe=16"``,
``"faiss:HNSW32;ef=64"``; a ``;`` separates the factory string from
query-time settings (``nprobe``, ``ef``: HNSW's ``efSearch``, named ``ef``
as everywhere in hypann; ``efSearch`` and ``ef_search`` are deprecated
aliases).
The process-wide faiss thread count (``faiss.omp_set_num_threads``) applies.
"""

from __future__ import annotations

import numpy as np

import warnings

from hypann._params import Param, resolve_aliases
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle, exact_sq_rtol, rerank_float64
from hypann.oracles.spec import parse_kwargs

_EF_DOC = "HNSW search list size efSearch (faiss uses max(ef, k))"

# Unit roundoff of float32.
_U32 = 2.0**-24


def float32_sq_dist_error(q_norm, max_norm, dim):
    """Bound on ``|F - D|``: float32 squared distance ``F`` against the float64 one ``D``.

    Rounding ``q`` and ``x`` to float32 moves each by at most ``u |.|``
    (``u = 2^-24``), so ``| |q32-x32| - |q-x| | <= e1 = u (|q| + |x|)`` and
    the squared distance moves by at most ``e1 (2 s + e1)`` with
    ``s = |q| + max|x|``. faiss then computes in float32, either from
    differences or as ``|q|^2 + |x|^2 - 2 q.x`` (BLAS); both stay within
    ``(d + 3) u s^2``, taken twice here:

    .. math:: E = e_1 (2 s + e_1) + 2 (d + 4)\\, u\\, s^2 ,

    plus 1 % for the rounding of this formula itself.
    """
    s = (np.asarray(q_norm, dtype=np.float64) + float(max_norm)) * (1.0 + 1e-12)
    e1 = _U32 * s * (1.0 + 1e-6)
    return 1.01 * (e1 * (2.0 * s + e1) + 2.0 * (float(dim) + 4.0) * _U32 * s * s)


def _import_faiss():
    try:
        import faiss
    except ImportError:
        raise ImportError(
            "the 'faiss' oracle needs the faiss library: pip install hypann[faiss] (faiss-cpu)"
        ) from None
    return faiss


class FaissOracle(EuclideanOracle):
    """A faiss index built by ``faiss.index_factory(d, factory)``.

    Parameters
    ----------
    factory : str, default "HNSW32"
        faiss factory string (``"Flat"``, ``"IVF256,Flat"``, ``"HNSW32"``, ...).
    nprobe : int, optional
        IVF lists visited per query.
    ef : int, optional
        HNSW ``efSearch`` (faiss uses ``max(efSearch, k)``), named ``ef`` as
        the search list size is everywhere in hypann.
    ef_search : int, optional
        Deprecated alias of ``ef``.
    """

    name = "faiss"
    exact = False
    thread_safe = True  # faiss CPU indexes search concurrently; per-call settings go in SearchParameters

    build_settings = (
        Param("factory", "str", "HNSW32", "faiss factory string",
              what='a faiss factory string such as "HNSW32" or "IVF256,Flat"'),
        Param("nprobe", "int", None, "IVF lists visited per query", low=1, none_ok=True),
        Param("ef", "int", None, _EF_DOC, low=1, none_ok=True, aliases=("ef_search",)),
    )
    query_settings = (
        Param("nprobe", "int", None, "IVF lists visited by this call", low=1, none_ok=True),
        Param("ef", "int", None, _EF_DOC + ", for this call", low=1, none_ok=True, aliases=("ef_search",)),
    )

    def __init__(self, *, factory: str = "HNSW32", nprobe: int | None = None, ef: int | None = None,
                 ef_search: int | None = None):
        _import_faiss()
        self.factory = factory
        self.nprobe = nprobe
        self.ef = resolve_aliases(self.build_settings, {"ef": ef, "ef_search": ef_search}, "FaissOracle")["ef"]
        self.exact = isinstance(factory, str) and factory.replace(" ", "") == "Flat"

    @property
    def ef_search(self):
        """Deprecated alias of :attr:`ef`."""
        warnings.warn("FaissOracle.ef_search is deprecated; use ef", DeprecationWarning, stacklevel=2)
        return self.ef

    @classmethod
    def from_spec_args(cls, args: str, *, random_state=None, name=None) -> FaissOracle:
        """``"FACTORY;key=value,..."``: a faiss factory string, then query settings
        (``nprobe``, ``ef``; ``efSearch`` / ``ef_search`` are deprecated aliases of
        ``ef``). ``random_state`` is not used (faiss builds are not seeded here)."""
        factory, _, settings = (args or "HNSW32").partition(";")
        if not factory.strip():
            raise ValueError(f"empty faiss factory string in spec {args!r}")
        declared = {p.name: p for p in cls.query_settings}
        kwargs = parse_kwargs(settings, where=f"faiss spec {args!r}", declared=declared)
        for key in kwargs:
            if key not in ("nprobe", "ef", "ef_search", "efSearch"):
                raise ValueError(f"unknown faiss query setting {key!r} in spec {args!r}; expected one of "
                                 f"{['ef', 'nprobe']}")
        if "efSearch" in kwargs:  # faiss's own spelling
            if "ef" in kwargs or "ef_search" in kwargs:
                raise ValueError(f"give ef or its deprecated alias efSearch, not both, in faiss spec {args!r}")
            warnings.warn(f"efSearch is deprecated in faiss spec {args!r}; use ef", DeprecationWarning, stacklevel=3)
            kwargs["ef"] = kwargs.pop("efSearch")
        kwargs = resolve_aliases(cls.query_settings, kwargs, f"faiss spec {args!r}", stacklevel=4)
        kwargs = {key: declared[key].check(value) for key, value in kwargs.items()}
        return cls(factory=factory.strip(), **kwargs)

    def spec(self) -> str:
        settings = [f"{k}={v}" for k, v in (("nprobe", self.nprobe), ("ef", self.ef)) if v is not None]
        return f"faiss:{self.factory}" + (";" + ",".join(settings) if settings else "")

    def _build(self, points):
        faiss = _import_faiss()
        try:
            index = faiss.index_factory(points.shape[1], self.factory, faiss.METRIC_L2)
        except RuntimeError as exc:
            raise ValueError(f"faiss cannot parse factory {self.factory!r}: {str(exc).splitlines()[-1]}") from None
        x32 = np.ascontiguousarray(points, dtype=np.float32)
        try:
            if not index.is_trained:
                index.train(x32)
            index.add(x32)
        except RuntimeError as exc:  # e.g. fewer training points than IVF lists
            reason = str(exc).splitlines()[-1].split("Error: ")[-1] if str(exc).strip() else type(exc).__name__
            raise ValueError(
                f"faiss cannot build {self.factory!r} on {points.shape[0]} points of dimension {points.shape[1]}: {reason}"
            ) from None
        space = faiss.ParameterSpace()
        for key, value in (("nprobe", self.nprobe), ("efSearch", self.ef)):
            if value is not None:
                try:
                    space.set_index_parameter(index, key, value)
                except RuntimeError:
                    raise ValueError(f"faiss setting {key}={value} does not apply to factory {self.factory!r}") from None
        self._index = index
        self._points = points
        self._max_norm = float(np.sqrt(np.einsum("ij,ij->i", points, points).max())) if len(points) else 0.0

    def _knn(self, queries, k, nprobe=None, ef=None):
        if k == 0:
            return EuclideanNeighbors(np.empty((len(queries), 0)), np.empty((len(queries), 0), np.int64))
        params = self._search_parameters(nprobe, ef)
        if self.exact:
            return self._knn_certified(queries, k)
        x32 = np.ascontiguousarray(queries, dtype=np.float32)
        _, ids = self._index.search(x32, k) if params is None else self._index.search(x32, k, params=params)
        sq, ids = rerank_float64(queries, self._points, ids.astype(np.int64))
        return EuclideanNeighbors(sq, ids)

    def _knn_certified(self, queries, k):
        """Float64-exact k-NN from a float32 ``Flat`` index by widening (module docstring)."""
        m = queries.shape[0]
        n = self.n_points_
        out_sq = np.full((m, k), np.inf)
        out_ids = np.full((m, k), -1, dtype=np.int64)
        err = float32_sq_dist_error(np.linalg.norm(queries, axis=1), self._max_norm, self.dim_)
        slack = 1.0 + exact_sq_rtol(self.dim_)
        x32 = np.ascontiguousarray(queries, dtype=np.float32)
        rows = np.arange(m)
        wide = min(n, 2 * k + 10)
        while rows.size:
            f32, ids = self._index.search(np.ascontiguousarray(x32[rows]), wide)
            sq, ids = rerank_float64(queries[rows], self._points, ids.astype(np.int64))
            last = np.where(ids[:, -1] >= 0, f32[:, -1].astype(np.float64), np.inf)
            done = (wide >= n) | (last - err[rows] > sq[:, k - 1] * slack)
            out_sq[rows[done]] = sq[done, :k]
            out_ids[rows[done]] = ids[done, :k]
            rows = rows[~done]
            wide = min(n, 4 * wide)
        return EuclideanNeighbors(out_sq, out_ids)

    def _search_parameters(self, nprobe, ef):
        """Per-call faiss ``SearchParameters`` (the index itself is not modified; values checked by ``knn``)."""
        if nprobe is None and ef is None:
            return None
        faiss = _import_faiss()
        index = faiss.downcast_index(self._index)
        if nprobe is not None:
            if faiss.try_extract_index_ivf(index) is None:
                raise ValueError(f"nprobe applies to IVF indexes, not to factory {self.factory!r}")
            return faiss.SearchParametersIVF(nprobe=int(nprobe))
        if not isinstance(index, faiss.IndexHNSW):
            raise ValueError(f"ef applies to HNSW indexes, not to factory {self.factory!r}")
        return faiss.SearchParametersHNSW(efSearch=int(ef))

    @property
    def nbytes(self):
        faiss = _import_faiss()
        return int(faiss.serialize_index(self._index).nbytes)
