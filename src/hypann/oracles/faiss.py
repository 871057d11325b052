"""Euclidean oracle on faiss (``pip install hypann[faiss]``): Flat, IVF, HNSW, any factory string.

faiss stores and compares float32 vectors: it *chooses* the ``k`` neighbours
in float32, then this oracle recomputes their squared distances in float64
from explicit differences and re-sorts them (hypann re-ranks hyperbolically
in float64 anyway). Points closer than float32 can resolve (coordinates
within ~6e-8 relative, i.e. near the boundary of the ball) may be ranked
wrongly by faiss even with ``"Flat"``; ``exact`` is True only for ``"Flat"``.

Spec strings: ``"faiss:HNSW32"``, ``"faiss:IVF256,Flat;nprobe=16"``,
``"faiss:HNSW32;efSearch=64"``; a ``;`` separates the factory string from
query-time settings (``nprobe``, ``efSearch``, also spelled ``ef_search``).
The process-wide faiss thread count (``faiss.omp_set_num_threads``) applies.
"""

from __future__ import annotations

import numpy as np

from hypann._validation import check_positive_int, check_str
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle, rerank_float64
from hypann.oracles.registry import parse_kwargs

_QUERY_SETTINGS = {"nprobe": "nprobe", "efSearch": "ef_search", "ef_search": "ef_search"}


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
    ef_search : int, optional
        HNSW ``efSearch`` (faiss uses ``max(efSearch, k)``).
    """

    name = "faiss"
    exact = False

    query_params = ("nprobe", "ef_search")

    def __init__(self, *, factory: str = "HNSW32", nprobe: int | None = None, ef_search: int | None = None):
        _import_faiss()
        self.factory = factory
        self.nprobe = nprobe
        self.ef_search = ef_search
        self.exact = isinstance(factory, str) and factory.replace(" ", "") == "Flat"

    @classmethod
    def from_spec_args(cls, args: str) -> FaissOracle:
        factory, _, settings = (args or "HNSW32").partition(";")
        if not factory.strip():
            raise ValueError(f"empty faiss factory string in spec {args!r}")
        kwargs = {}
        for key, value in parse_kwargs(settings, where=f"faiss spec {args!r}").items():
            if key not in _QUERY_SETTINGS:
                raise ValueError(
                    f"unknown faiss query setting {key!r} in spec {args!r}; expected one of {sorted(_QUERY_SETTINGS)}"
                )
            kwargs[_QUERY_SETTINGS[key]] = value
        return cls(factory=factory.strip(), **kwargs)

    def spec(self) -> str:
        settings = [f"{k}={v}" for k, v in (("nprobe", self.nprobe), ("efSearch", self.ef_search)) if v is not None]
        return f"faiss:{self.factory}" + (";" + ",".join(settings) if settings else "")

    def _check_settings(self):
        check_str(self.factory, "factory", what='a faiss factory string such as "HNSW32" or "IVF256,Flat"')
        check_positive_int(self.nprobe, "nprobe", allow_none=True)
        check_positive_int(self.ef_search, "ef_search", allow_none=True)

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
        for key, value in (("nprobe", self.nprobe), ("efSearch", self.ef_search)):
            if value is not None:
                try:
                    space.set_index_parameter(index, key, value)
                except RuntimeError:
                    raise ValueError(f"faiss setting {key}={value} does not apply to factory {self.factory!r}") from None
        self._index = index
        self._points = points

    def _knn(self, queries, k, nprobe=None, ef_search=None):
        if k == 0:
            return EuclideanNeighbors(np.empty((len(queries), 0)), np.empty((len(queries), 0), np.int64))
        params = self._search_parameters(nprobe, ef_search)
        x32 = np.ascontiguousarray(queries, dtype=np.float32)
        _, ids = self._index.search(x32, k) if params is None else self._index.search(x32, k, params=params)
        sq, ids = rerank_float64(queries, self._points, ids.astype(np.int64))
        return EuclideanNeighbors(sq, ids)

    def _search_parameters(self, nprobe, ef_search):
        """Per-call faiss ``SearchParameters`` (the index itself is not modified)."""
        if nprobe is None and ef_search is None:
            return None
        faiss = _import_faiss()
        index = faiss.downcast_index(self._index)
        if nprobe is not None:
            check_positive_int(nprobe, "nprobe")
            if faiss.try_extract_index_ivf(index) is None:
                raise ValueError(f"nprobe applies to IVF indexes, not to factory {self.factory!r}")
            return faiss.SearchParametersIVF(nprobe=int(nprobe))
        check_positive_int(ef_search, "ef_search")
        if not isinstance(index, faiss.IndexHNSW):
            raise ValueError(f"ef_search applies to HNSW indexes, not to factory {self.factory!r}")
        return faiss.SearchParametersHNSW(efSearch=int(ef_search))

    @property
    def nbytes(self):
        faiss = _import_faiss()
        return int(faiss.serialize_index(self._index).nbytes)
