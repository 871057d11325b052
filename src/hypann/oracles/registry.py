"""Spec strings -> oracle instances: ``"kdtree"``, ``"lsh:tables=5,bits=15"``, ``"faiss:HNSW32"``.

A spec is ``name`` or ``name:args``. For most oracles ``args`` is a comma-
separated list of ``key=value`` settings passed to the constructor, each one
parsed and type-checked by the oracle's declaration (``build_settings``,
:meth:`EuclideanOracle.from_spec_args <hypann.oracles.base.EuclideanOracle.from_spec_args>`).
An oracle class may override ``from_spec_args`` to parse its own syntax
(faiss takes a factory string such as ``"IVF1024,Flat;nprobe=16"``).

Third-party libraries register with :func:`register_oracle`.
"""

from __future__ import annotations

import importlib
import inspect

from hypann.oracles.base import EuclideanOracle
from hypann.oracles.spec import parse_value  # noqa: F401 - public here too (the CLI reads --param values)

# The oracles shipped with hypann, by the import path of their class: a saved
# index names them by spec only. The classes of this layer are imported on first
# use by :func:`_load_builtin` (faiss and hnswlib need their optional libraries
# only then); ``hkdtree`` lives in the search layer above, whose module
# registers its class when it is imported (as every index does).
_BUILTIN: dict[str, str] = {
    "brute": "hypann.oracles.brute:BruteForceOracle",
    "kdtree": "hypann.oracles.kdtree:KDTreeOracle",
    "hkdtree": "hypann.search.hyperbolic_kdtree:HyperbolicKDTreeOracle",
    "lsh": "hypann.oracles.lsh:LSHOracle",
    "faiss": "hypann.oracles.faiss:FaissOracle",
    "hnswlib": "hypann.oracles.hnswlib:HnswlibOracle",
}
# name -> class, or "module:Class" (a built-in not loaded yet, or a third-party path)
_REGISTRY: dict[str, object] = dict(_BUILTIN)


def _load_builtin(name: str):
    """The class of the built-in oracle ``name`` of this layer (explicit imports, no lookup by string)."""
    if name == "brute":
        from hypann.oracles.brute import BruteForceOracle as cls
    elif name == "kdtree":
        from hypann.oracles.kdtree import KDTreeOracle as cls
    elif name == "lsh":
        from hypann.oracles.lsh import LSHOracle as cls
    elif name == "faiss":
        from hypann.oracles.faiss import FaissOracle as cls
    elif name == "hnswlib":
        from hypann.oracles.hnswlib import HnswlibOracle as cls
    else:  # hkdtree before hypann.search.hyperbolic_kdtree was imported
        module = _BUILTIN[name].partition(":")[0]
        raise ValueError(
            f"oracle {name!r} is defined in {module} (the search layer, above the oracles); import that module "
            f"or hypann.HyperbolicIndex first, which registers it"
        )
    return cls


def register_oracle(name: str, target) -> None:
    """Make ``name`` usable in spec strings; ``target`` is a class or ``"module:Class"``.

    An index saved with such an oracle records the class's import path
    (``oracle_class`` in the file header): a process that has not registered
    ``name`` imports that module when loading the file and registers the
    class itself, so define the class in an importable module (not in
    ``__main__`` or inside a function) for the file to load elsewhere.
    """
    _REGISTRY[name] = target


def available_oracles() -> list[str]:
    return sorted(_REGISTRY)


def is_registered(name: str) -> bool:
    """Whether ``name`` (the part of a spec before ``:``) names a registered oracle."""
    return name in _REGISTRY


def spec_name(spec: str) -> str:
    """The oracle name of a spec string: ``"lsh:tables=5"`` -> ``"lsh"``."""
    return spec.partition(":")[0].strip()


def class_import_path(oracle) -> str | None:
    """``"module:QualName"`` of a third-party oracle's class; None for a built-in one.

    ``oracle`` is a spec string or an :class:`EuclideanOracle` instance. A
    spec whose name is still registered to its built-in class gives None
    (the spec alone recreates it). None too when the class cannot be
    imported by that path in another process (defined in ``__main__`` or
    inside a function).
    """
    if isinstance(oracle, EuclideanOracle):
        cls = type(oracle)
        name = None
    else:
        name = spec_name(oracle)
        target = _REGISTRY.get(name)
        if target is None or (name in _BUILTIN and target == _BUILTIN[name]):
            return None
        if isinstance(target, str):
            return target
        cls = target
    module, qualname = cls.__module__, cls.__qualname__
    if f"{module}:{qualname}" == _BUILTIN.get(name) or (name is None and f"{module}:{qualname}" in _BUILTIN.values()):
        return None
    if module == "__main__" or "<locals>" in qualname:
        return None
    return f"{module}:{qualname}"


def import_oracle_class(path: str):
    """The class named by ``"module:QualName"``: imports ``module`` only, checks an EuclideanOracle subclass.

    Raises ImportError (module or attribute missing) or TypeError (not an
    :class:`EuclideanOracle` subclass).
    """
    module_name, _, qualname = path.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no attribute {qualname!r}") from None
    if not (inspect.isclass(obj) and issubclass(obj, EuclideanOracle)):
        raise TypeError(f"{path!r} is not a subclass of hypann.oracles.base.EuclideanOracle")
    return obj


def _resolve(name: str):
    target = _REGISTRY.get(name)
    if target is None:
        raise ValueError(f"unknown oracle {name!r}; expected one of {available_oracles()}")
    if isinstance(target, str):
        target = _load_builtin(name) if _BUILTIN.get(name) == target else import_oracle_class(target)
        _REGISTRY[name] = target
    return target


def make_oracle(spec, *, random_state=None) -> EuclideanOracle:
    """Build an (unfitted) oracle from a spec string or return an oracle instance as is.

    Parameters
    ----------
    spec : str or EuclideanOracle
    random_state : int or None
        Seed given to an oracle class that takes ``random_state`` (LSH,
        hnswlib) when the spec does not set one itself; None keeps the
        oracle's default. Ignored for instances.
    """
    if isinstance(spec, EuclideanOracle):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"oracle must be a spec string or an EuclideanOracle, got {type(spec).__name__}")
    name, _, args = spec.partition(":")
    name = name.strip()
    cls = _resolve(name)
    if not (inspect.isclass(cls) and issubclass(cls, EuclideanOracle)):
        raise TypeError(f"oracle {name!r} is registered to {cls!r}, not a subclass of "
                        f"hypann.oracles.base.EuclideanOracle")
    return cls.from_spec_args(args, random_state=random_state, name=name)
