"""The settings part of an oracle spec string: ``"tables=5,bits=15"`` -> ``{"tables": 5, "bits": 15}``.

Shared by :mod:`hypann.oracles.registry` and the oracles that parse their own
spec syntax (faiss), which the registry loads: keeping the parser here keeps
the registry and those oracles free of an import cycle.
"""

from __future__ import annotations

from hypann._params import parse_text


def parse_value(text: str):
    """Parse one spec value: int, float, bool, None or string.

    Only the literals ``true`` / ``false`` (any case) become booleans; other
    words (``yes``, ``no``, ``on``) stay strings, which boolean settings
    refuse, and ``1`` / ``0`` stay integers.
    """
    return parse_text(text)


def parse_kwargs(args: str, *, where: str, declared: dict | None = None) -> dict:
    """``"a=1,b=x"`` -> ``{"a": 1, "b": "x"}``; raises ValueError naming the bad item.

    ``declared`` (``{name: Param}``): a declared setting's value is read by
    its :meth:`~hypann._params.Param.parse` (a string setting keeps its text).
    """
    out = {}
    if not args:
        return out
    for item in args.split(","):
        if "=" not in item:
            raise ValueError(f"bad setting {item!r} in {where}: expected key=value")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key.isidentifier():
            raise ValueError(f"bad setting name {key!r} in {where}")
        out[key] = declared[key].parse(value) if declared and key in declared else parse_value(value)
    return out
