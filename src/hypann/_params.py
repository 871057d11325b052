"""Declared settings: one :class:`Param` per build or query setting of an algorithm or oracle.

Every :class:`~hypann.search.base.SearchAlgorithm` and
:class:`~hypann.oracles.base.EuclideanOracle` lists its settings once, as two
class attributes:

``build_settings``
    the keyword-only arguments of ``__init__``, in order, with their defaults;
``query_settings``
    the per-call keywords of ``search`` (algorithms) or ``knn`` (oracles).

From that declaration come the validation of values (:meth:`Param.check`,
messages naming the parameter, the value and what is allowed), the
unknown-option checks of :func:`hypann.search.registry.make_algorithm` and of
oracle spec strings, the parsing of spec-string and ``--param`` values
(:meth:`Param.parse`), ``get_params()`` and the parameter tables of
``docs/parameters.md`` (:func:`hypann.settings.parameters_markdown`).
``tests/test_settings_table.py`` checks that the declarations agree with the
signatures, the docs and the command line.

A renamed setting keeps its old name in ``aliases``: the old name still works
and raises a :class:`DeprecationWarning` (:func:`resolve_aliases`).
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass

from hypann import _validation as V

#: the kinds of value a :class:`Param` takes
KINDS = ("int", "float", "bool", "seed", "str", "any")


@dataclass(frozen=True)
class Param:
    """One build or query setting of an algorithm or an oracle.

    Attributes
    ----------
    name : str
        The keyword.
    kind : {"int", "float", "bool", "seed", "str", "any"}
        ``"seed"``: an integer ``>= 0`` (a ``random_state``); ``"any"``: not
        checked (settings of a third-party oracle that declares none).
    default : object
        The default of the keyword (``None``: chosen by the algorithm, see ``doc``).
    doc : str
        One line for the docs table.
    low, high : float or None
        Bounds of an ``"int"`` or ``"float"`` (inclusive unless ``low_open`` /
        ``high_open``).
    none_ok : bool
        Whether ``None`` is accepted.
    extra : tuple
        Other accepted values: integers outside the bounds (``-1`` for "all
        cores") or, for a ``"float"``, strings such as ``"auto"``.
    choices : tuple
        The only accepted values of a ``"str"`` or ``"int"`` setting.
    what : str or None
        The allowed values in words, when the fields above cannot say them
        (error messages and docs use it).
    aliases : tuple of str
        Deprecated names that still work (with a :class:`DeprecationWarning`).
    """

    name: str
    kind: str
    default: object
    doc: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    none_ok: bool = False
    extra: tuple = ()
    choices: tuple = ()
    what: str | None = None
    aliases: tuple = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Param {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")

    # -------------------------------------------------------------- checking
    def check(self, value, name=None):
        """``value`` if it is allowed (normalised: ints to int, reals to float), else
        ValueError / :class:`~hypann._validation.ParameterTypeError` naming it.

        ``name`` is the keyword the caller used (a deprecated alias), default ``self.name``.
        """
        name = name or self.name
        if value is None and self.none_ok:
            return None
        if self.kind == "any":
            return value
        if self.kind == "bool":
            return V.check_bool(value, name)
        if self.kind == "seed":
            return V.check_seed(value, name, allow_none=self.none_ok)
        if self.kind == "str":
            if self.choices:
                if not isinstance(value, str) or value not in self.choices:
                    raise ValueError(f"{name} must be one of {self.choices}, got {name}={value!r}")
                return value
            return V.check_str(value, name, what=self.what or "a string")
        if self.kind == "int":
            if any(isinstance(e, str) for e in self.extra):  # a number or a word ("auto")
                if isinstance(value, str):
                    if value in self.extra:
                        return value
                    raise V.ParameterTypeError(f"{name} must be {self.allowed()}, got {name}={value!r}")
                if not V._is_int(value):
                    raise V.ParameterTypeError(
                        f"{name} must be {self.allowed()}, got {name}={value!r} ({type(value).__name__})")
                if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
                    raise ValueError(f"{name} must be {self.allowed()}, got {name}={value!r}")
                return int(value)
            if self.choices:
                allowed = self.allowed()
                if not V._is_int(value):
                    raise V.ParameterTypeError(f"{name} must be {allowed}, got {name}={value!r} ({type(value).__name__})")
                if value not in self.choices:
                    raise ValueError(f"{name} must be {allowed}, got {name}={value!r}")
                return int(value)
            if self.low == 1 and self.high is None and not self.extra:
                return V.check_positive_int(value, name, allow_none=self.none_ok)
            return V.check_int(value, name, low=self.low, high=self.high, allow_none=self.none_ok, extra=self.extra)
        # float
        if isinstance(value, str) and self.extra:
            if value in self.extra:
                return value
            raise V.ParameterTypeError(f"{name} must be {self.allowed()}, got {name}={value!r}")
        return V.check_real(value, name, low=self.low, high=self.high, low_open=self.low_open,
                            high_open=self.high_open, allow_none=self.none_ok)

    def allowed(self) -> str:
        """The allowed values in words (the docs table's column)."""
        if self.what:
            text = self.what
        elif self.kind == "bool":
            text = "True or False"
        elif self.kind == "seed":
            text = "an integer >= 0"
        elif self.kind == "any":
            text = "any value (not checked)"
        elif self.choices:
            text = " or ".join(repr(c) for c in self.choices)
        elif self.kind == "str":
            text = "a string"
        elif self.kind == "int":
            if self.low == 1 and self.high is None and not self.extra:
                text = "a positive integer"
            elif self.low is not None and self.high is not None:
                text = f"an integer in [{self.low}, {self.high}]"
            elif self.low is not None:
                text = f"an integer >= {self.low}"
            elif self.high is not None:
                text = f"an integer <= {self.high}"
            else:
                text = "an integer"
        else:
            bounds = []
            if self.low is not None:
                bounds.append(f"{'>' if self.low_open else '>='} {self.low:g}")
            if self.high is not None:
                bounds.append(f"{'<' if self.high_open else '<='} {self.high:g}")
            text = "a number" + (" " + " and ".join(bounds) if bounds else "")
        if self.kind in ("int", "float") and not self.choices and not self.what:
            text = " or ".join([text, *(repr(e) for e in self.extra)])
        if self.none_ok:
            text += " or None"
        return text

    # --------------------------------------------------------------- parsing
    def parse(self, text: str):
        """The value of a spec-string or ``--param`` item: a string setting keeps the
        text, any other is read as int, float, bool or None (:func:`~hypann.oracles.spec.parse_value`
        rules: only ``true``/``false`` are booleans)."""
        if self.kind == "str" and text.strip().lower() != "none":
            return text.strip()
        return parse_text(text)


def parse_text(text: str):
    """Parse one setting value: int, float, bool (``true``/``false`` only), None or a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def names(params) -> list[str]:
    """The names of a declaration, in order."""
    return [p.name for p in params]


def accepted_names(params) -> tuple:
    """Names and deprecated aliases of a declaration."""
    return tuple(n for p in params for n in (p.name, *p.aliases))


def by_name(params) -> dict:
    """``{name: Param}`` of a declaration."""
    return {p.name: p for p in params}


def resolve_aliases(params, values: dict, where: str, *, stacklevel=3) -> dict:
    """``values`` with each deprecated alias renamed to its setting (DeprecationWarning).

    Giving a setting and its alias together is a ValueError.
    """
    out = dict(values)
    for p in params:
        for alias in p.aliases:
            if alias not in out:
                continue
            value = out.pop(alias)
            if value is None:
                continue
            if out.get(p.name) is not None:
                raise ValueError(f"give {p.name} or its deprecated alias {alias}, not both "
                                 f"({p.name}={out[p.name]!r}, {alias}={value!r})")
            warnings.warn(f"{alias} is deprecated for {where}; use {p.name}", DeprecationWarning,
                          stacklevel=stacklevel)
            out[p.name] = value
    return out


def check_values(params, values: dict, *, aliases: dict | None = None) -> dict:
    """``values`` (a subset of the declared names) checked by their declarations; None stays None
    for a setting whose default is None or that means "the build's default"."""
    table = by_name(params)
    out = {}
    for key, value in values.items():
        p = table[key]
        out[key] = value if value is None else p.check(value, (aliases or {}).get(key))
    return out


def from_signature(init) -> tuple:
    """An unchecked declaration (kind ``"any"``) read from a constructor's keywords.

    For a third-party oracle class that declares no ``build_settings``.
    """
    return tuple(Param(name, "any", None if default is inspect.Parameter.empty else default)
                 for name, default in signature_defaults(init).items())


def signature_defaults(init) -> dict:
    """``{keyword: default}`` of a constructor's keyword arguments (for tests and checks)."""
    if init is object.__init__:
        return {}
    return {p.name: p.default for p in inspect.signature(init).parameters.values()
            if p.kind == p.KEYWORD_ONLY or (p.kind == p.POSITIONAL_OR_KEYWORD and p.name != "self")}
